package gang_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	k8stesting "k8s.io/client-go/testing"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	apidispatcher "k8s.io/kubernetes/pkg/scheduler/backend/api_dispatcher"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	apicalls "k8s.io/kubernetes/pkg/scheduler/framework/api_calls"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/schedloop/schedloop/internal/podgroup"
)

// dispatchingCacher is the scheduler's APICacher for pod status patches
// (its scheduling queue's PatchPodStatus) over kube-scheduler's own API
// dispatcher; queued is told of each call once the dispatcher holds it.
type dispatchingCacher struct {
	d      *apidispatcher.APIDispatcher
	queued func()
}

func (c *dispatchingCacher) PatchPodStatus(pod *v1.Pod, conditions []*v1.PodCondition, ni *fwk.NominatingInfo) (<-chan error, error) {
	onFinish := make(chan error, 1)
	err := c.d.Add(apicalls.Implementations.PodStatusPatch(pod, conditions, ni), fwk.APICallOptions{OnFinish: onFinish})
	c.queued()
	if fwk.IsUnexpectedError(err) {
		return onFinish, err
	}
	return onFinish, nil
}

func (c *dispatchingCacher) BindPod(*v1.Binding) (<-chan error, error) {
	return nil, errors.New("not used")
}

func (c *dispatchingCacher) WaitOnFinish(ctx context.Context, onFinish <-chan error) error {
	select {
	case err := <-onFinish:
		if fwk.IsUnexpectedError(err) {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// With the scheduler's API calls made asynchronously, a member's
// nomination (written by the binding cycle before the member waits at
// Permit) may still be in flight in the API dispatcher when the member is
// turned away. The clear its Unreserve writes lands after it all the
// same: the nomination patch is held in flight until either the clear is
// queued in the dispatcher or written straight to the API server, and the
// last write of the nominated node must be the clear. Writing the clear
// only straight to the API server, it landed first and the nomination
// stayed.
func TestUnreserveClearsTheNominationAfterAnAsyncWrite(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.NominatedNodeNameForExpectation, true)
	held := member("ok-0", "ok", "1")
	f := newFixture(t, []*v1.Pod{held, member("ok-1", "ok", "1")}, podgroup.New("default", "ok", 2))
	ctx := t.Context()

	// writes are the nominated node each status write left, in the order
	// they were applied: "" for a clear.
	var mu sync.Mutex
	var writes []string
	wrote := func(patch []byte) {
		mu.Lock()
		defer mu.Unlock()
		switch p := string(patch); {
		case strings.Contains(p, `"nominatedNodeName":"n1"`):
			writes = append(writes, "n1")
		case strings.Contains(p, `"nominatedNodeName":null`):
			writes = append(writes, "")
		}
	}
	inFlight, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	f.client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patch := a.(k8stesting.PatchAction).GetPatch()
		if strings.Contains(string(patch), `"nominatedNodeName":"n1"`) {
			close(inFlight)
			<-release
		}
		wrote(patch)
		return false, nil, nil
	})
	f.dyn.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		letGo()
		wrote(a.(k8stesting.PatchAction).GetPatch())
		return false, nil, nil
	})
	schedmetrics.Register() // the dispatcher counts its calls
	d := apidispatcher.New(f.client, 4, apicalls.Relevances)
	d.Run(klog.Background())
	t.Cleanup(d.Close)
	calls := 0
	cacher := &dispatchingCacher{d: d, queued: func() {
		if calls++; calls > 1 {
			letGo()
		}
	}}
	f.h.mu.Lock()
	f.h.cacher = cacher
	f.h.mu.Unlock()

	state := framework.NewCycleState()
	if _, s := f.plugin.PreFilter(ctx, state, held, []fwk.NodeInfo{gpuNode("n1", "8")}); !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s)
	}
	if s := f.plugin.Reserve(ctx, state, held, "n1"); !s.IsSuccess() {
		t.Fatalf("Reserve: %v", s)
	}
	if s, _ := f.plugin.Permit(ctx, state, held, "n1"); s.Code() != fwk.Wait {
		t.Fatalf("Permit = %v, want Wait", s)
	}
	// The binding cycle's nomination, as kube-scheduler queues it.
	nominated, err := cacher.PatchPodStatus(held, nil, &fwk.NominatingInfo{NominatingMode: fwk.ModeOverride, NominatedNodeName: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	<-inFlight
	f.plugin.Unreserve(ctx, state, held, "n1")
	letGo()
	if err := cacher.WaitOnFinish(ctx, nominated); err != nil {
		t.Fatalf("the nomination: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(writes) == 0 || writes[len(writes)-1] != "" {
		t.Fatalf("nominated node writes, in the order applied: %q; the last must clear it", writes)
	}
	if writes[0] != "n1" {
		t.Fatalf("nominated node writes, in the order applied: %q; the nomination in flight must land first", writes)
	}
}

// A Workload API member is placed in a pod-group cycle: tried on the
// snapshot (a trial reservation, taken back whatever the outcome), then,
// the group fitting, reserved and permitted again for binding once the
// scheduler has set the cycle's pod-group state aside. Turned away at
// Permit there, its nomination is cleared as a PodGroup member's is, though
// the pod object the plugin is handed carries none.
func TestUnreserveClearsAWorkloadMembersNomination(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.NominatedNodeNameForExpectation, true)
	held, seen := workloadMember("ok-0", "ok", "1"), workloadMember("ok-0", "ok", "1")
	held.Status.NominatedNodeName = "n1"
	_, ok := podgroup.NewWorkload("default", "ok", 2)
	f := newFixtureWith(t, []*v1.Pod{held, workloadMember("ok-1", "ok", "1")}, []*schedulingv1beta1.PodGroup{ok})
	ctx := t.Context()
	nodes := []fwk.NodeInfo{gpuNode("n1", "8")}
	state := framework.NewCycleState()
	state.SetPodGroupSchedulingCycle(framework.NewCycleState())
	if _, s := f.plugin.PreFilter(ctx, state, seen, nodes); !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s)
	}
	if s := f.plugin.Reserve(ctx, state, seen, "n1"); !s.IsSuccess() {
		t.Fatalf("trial Reserve: %v", s)
	}
	f.plugin.Unreserve(ctx, state, seen, "n1") // the trial taken back
	state.SetPodGroupSchedulingCycle(nil)      // as kube-scheduler does before binding
	if s := f.plugin.Reserve(ctx, state, seen, "n1"); !s.IsSuccess() {
		t.Fatalf("Reserve: %v", s)
	}
	if s, _ := f.plugin.Permit(ctx, state, seen, "n1"); s.Code() != fwk.Wait {
		t.Fatalf("Permit = %v, want Wait", s)
	}
	f.plugin.Unreserve(ctx, state, seen, "n1")
	u, err := f.dyn.Resource(podsGVR).Namespace("default").Get(ctx, "ok-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nnn, _, _ := unstructured.NestedString(u.Object, "status", "nominatedNodeName"); nnn != "" {
		t.Fatalf("released Workload API member still nominated to %q", nnn)
	}
}
