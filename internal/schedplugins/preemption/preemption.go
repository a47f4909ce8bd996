// Package preemption is schedloop's PostFilter plugin: kube-scheduler's
// DefaultPreemption, whose victim choice the simulator replays
// (scoring.SelectVictims, scoring.BetterPreemption), with the profile's
// victim rule added through the hook the framework gives for it
// (IsEligiblePod): a pod is offered as a victim only when
// scoring.Params.Preemptible allows it — never a pod labelled
// schedloop.io/preemptible: "false", never one that has run for less than
// the profile's preemption.minRunTimeSeconds. A victim the framework
// groups (a pod group) is offered only when every pod of it is.
//
// It holds no rule of its own: the eligibility is scoring's, the search
// and the eviction DefaultPreemption's.
package preemption

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
)

// Name is the plugin's name in KubeSchedulerConfiguration. It replaces
// DefaultPreemption at postFilter (a profile must not enable both).
const Name = "SchedloopPreemption"

// Plugin is DefaultPreemption with schedloop's victim rule.
type Plugin struct {
	*defaultpreemption.DefaultPreemption
}

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

// New builds the plugin with DefaultPreemption's default arguments
// (minCandidateNodesPercentage 10, minCandidateNodesAbsolute 100) and the
// scheduler's feature gates.
func New(ctx context.Context, _ runtime.Object, h fwk.Handle, holder *profilewatch.Holder, now func() time.Time) (*Plugin, error) {
	args := &config.DefaultPreemptionArgs{MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100}
	dp, err := defaultpreemption.New(ctx, args, h, plfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if now == nil {
		now = time.Now
	}
	dp.IsEligiblePod = func(_ fwk.NodeInfo, victim preemption.Victim, _ *v1.Pod) bool {
		params := holder.Load().Params
		at := now().UnixNano()
		for _, pi := range victim.Pods() {
			if !params.Preemptible(Started(pi.GetPod(), at), at, podspec.NonPreemptible(pi.GetPod())) {
				return false
			}
		}
		return true
	}
	return &Plugin{DefaultPreemption: dp}, nil
}

// Started is when pod started running, in Unix nanoseconds: its status's
// start time, else now (a pod bound but not yet started has run for
// nothing).
func Started(pod *v1.Pod, now int64) int64 {
	if t := pod.Status.StartTime; t != nil {
		return t.UnixNano()
	}
	return now
}
