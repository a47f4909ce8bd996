package schedplugins_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/pkg/features"

	"github.com/schedloop/schedloop/internal/schedplugins"
)

// refuseReserve is a test plugin: while on, it refuses at Reserve the pods
// labelled labelRefuse, outside a pod-group cycle's trials, that is when
// the scheduler reserves a Workload API gang's members again for binding
// after its pod-group cycle found them all a node. Before refusing, it
// waits until every member held at Permit carries its nominated node, so
// the member's refusal releases nominated members.
type refuseReserve struct {
	h       fwk.Handle
	on      atomic.Bool
	refused atomic.Int64
}

const (
	refuseReserveName = "TestRefuseReserve"
	labelRefuse       = "schedloop.io/test-refuse-reserve"
)

func (r *refuseReserve) Name() string { return refuseReserveName }

func (r *refuseReserve) Reserve(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ string) *fwk.Status {
	if !r.on.Load() || state.IsPodGroupSchedulingCycle() || pod.Labels[labelRefuse] == "" {
		return nil
	}
	pods := r.h.SharedInformerFactory().Core().V1().Pods().Lister()
	_ = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		all := true
		r.h.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
			p, err := pods.Pods(wp.GetPod().Namespace).Get(wp.GetPod().Name)
			all = all && err == nil && p.Status.NominatedNodeName != ""
		})
		return all, nil
	})
	r.refused.Add(1)
	return fwk.NewStatus(fwk.Unschedulable, "refused at Reserve by the test")
}

func (r *refuseReserve) Unreserve(context.Context, fwk.CycleState, *corev1.Pod, string) {}

// A Workload API gang's members held at Permit are written as nominated
// to their nodes (NominatedNodeNameForExpectation), as a PodGroup gang's
// are. The scheduler places such a gang in a pod-group cycle, trying each
// member on its snapshot and taking the trials back, then reserves and
// permits the members one by one for binding; when one of them is
// refused there, the gang is released and the members held at Permit are
// rejected. They carry no nomination while the gang backs off, as
// TestReleasedGangMembersKeepNoNomination requires of a PodGroup gang:
// the pod-group cycle's state is gone by Reserve, so SchedloopGang's
// Unreserve clears the nomination on this path too. Then, the refusal
// lifted, the gang lands whole.
func TestReleasedWorkloadGangMembersKeepNoNomination(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.NominatedNodeNameForExpectation, true)
	const backoff = 30 * time.Second // holds the released gang still while it is looked at
	refuse := &refuseReserve{}
	refuse.on.Store(true)
	e := newEnvWithPlugins(t, gpuNodes("n", 2, nil), "", schedplugins.NewSet(), func(config string) string {
		config = strings.Replace(config, "backoffSeconds: 2", "backoffSeconds: 30", 1)
		return strings.Replace(config, "      - name: SchedloopTopology\n", "      - name: SchedloopTopology\n      - name: "+refuseReserveName+"\n", 1)
	}, app.WithPlugin(refuseReserveName, func(_ context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		refuse.h = h
		return refuse, nil
	}))
	ctx := t.Context()

	// Every member seen nominated, by the test's own informer.
	var mu sync.Mutex
	nominated := map[string]bool{}
	factory := informers.NewSharedInformerFactoryWithOptions(e.c.Client, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	seen := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && strings.HasPrefix(p.Name, "w-") && p.Status.NominatedNodeName != "" {
			mu.Lock()
			nominated[p.Name] = true
			mu.Unlock()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(factory.Shutdown)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("pod informer did not sync")
	}

	e.workloadGang("w", ours, 4, 4, func(p *corev1.Pod) {
		if p.Name == "w-3" {
			p.Labels[labelRefuse] = "true"
		}
	})
	e.waitFor("a member refused at Reserve", func() bool { return refuse.refused.Load() > 0 })
	var held []string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, backoff*2/3, true, func(context.Context) (bool, error) {
		pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1ListAll)
		if err != nil {
			return false, err
		}
		held = nil
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, "w-") && (p.Spec.NodeName != "" || p.Status.NominatedNodeName != "") {
				held = append(held, p.Name+" on "+p.Spec.NodeName+p.Status.NominatedNodeName)
			}
		}
		return len(held) == 0, nil
	}); err != nil {
		t.Fatalf("released Workload API gang's members still bound or nominated: %v", held)
	}
	mu.Lock()
	if len(nominated) == 0 {
		mu.Unlock()
		t.Fatal("no member of the gang was ever nominated: the release cleared nothing")
	}
	t.Logf("members nominated while held, then cleared: %d", len(nominated))
	mu.Unlock()

	refuse.on.Store(false)
	if n := len(nodesOf(e.waitBound("w-", 4))); n != 2 {
		t.Fatalf("gang of 4x4 GPUs on %d nodes, want both 8-GPU nodes", n)
	}
}
