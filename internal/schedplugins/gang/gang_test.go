package gang_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/reasons"
	"github.com/schedloop/schedloop/internal/schedplugins/gang"
	"github.com/schedloop/schedloop/internal/schedplugins/gang/core"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/scoring"
)

// handle is the part of the framework handle the manager uses, recording
// what it asks for.
type handle struct {
	mu        sync.Mutex
	activated []string
	// cacher is the scheduler's APICacher, nil unless a test sets one
	// (feature SchedulerAsyncAPICalls).
	cacher fwk.APICacher
}

func (h *handle) APICacher() fwk.APICacher {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cacher
}

func (h *handle) IterateOverWaitingPods(func(fwk.WaitingPod)) {}

func (h *handle) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range pods {
		h.activated = append(h.activated, k)
	}
}

type fixture struct {
	h      *handle
	plugin *gang.Gang
	mgr    *core.Manager
	client *fake.Clientset
	dyn    *dynamicfake.FakeDynamicClient
}

// newFixture runs a gang manager over a fake clientset holding pods and a
// fake dynamic client holding groups, with the informers synced.
func newFixture(t *testing.T, pods []*v1.Pod, groups ...*podgroup.PodGroup) *fixture {
	t.Helper()
	return newFixtureWith(t, pods, nil, groups...)
}

// newFixtureWith also holds Workload API PodGroups in the fake clientset.
func newFixtureWith(t *testing.T, pods []*v1.Pod, workloadGroups []*schedulingv1beta1.PodGroup, groups ...*podgroup.PodGroup) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	for _, g := range workloadGroups {
		objs = append(objs, g)
	}
	client := fake.NewClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	// The dynamic client holds the pods too: the manager writes their
	// status through it (core.Manager.Unnominate).
	var dynObjs []runtime.Object
	for _, p := range pods {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{Object: u}
		obj.SetAPIVersion("v1")
		obj.SetKind("Pod")
		dynObjs = append(dynObjs, obj)
	}
	for _, g := range groups {
		u, err := podgroup.ToUnstructured(g)
		if err != nil {
			t.Fatal(err)
		}
		dynObjs = append(dynObjs, u)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{podgroup.GVR: podgroup.Kind + "List", podsGVR: "PodList"}, dynObjs...)
	h := &handle{}
	mgr, err := core.New(ctx, core.Options{Handle: h, PodInformer: factory.Core().V1().Pods().Informer(),
		Dynamic: dyn, Backoff: time.Minute, StatusDelay: time.Millisecond,
		WorkloadPodGroups: factory.Scheduling().V1beta1().PodGroups().Lister()})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	p, err := gang.New(nil, mgr, profilewatch.NewHolder(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{h: h, plugin: p, mgr: mgr, client: client, dyn: dyn}
}

var podsGVR = v1.SchemeGroupVersion.WithResource("pods")

func member(name, group string, gpus string) *v1.Pod {
	w := st.MakePod().Namespace("default").Name(name).UID(name).Req(map[v1.ResourceName]string{v1.ResourceCPU: "1"})
	if gpus != "" {
		w = w.Res(map[v1.ResourceName]string{v1.ResourceCPU: "1", podspec.ResourceGPU: gpus})
	}
	if group != "" {
		w = w.Label(podgroup.LabelPodGroup, group)
	}
	return w.Obj()
}

func gpuNode(name string, gpus string, pods ...*v1.Pod) fwk.NodeInfo {
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(st.MakeNode().Name(name).Capacity(map[v1.ResourceName]string{
		v1.ResourceCPU: "64", v1.ResourceMemory: "256Gi", podspec.ResourceGPU: gpus}).Obj())
	return ni
}

// preFilterCase is one member's expected PreFilter outcome; an empty reason
// is not checked.
type preFilterCase struct {
	pod    *v1.Pod
	code   fwk.Code
	reason string
}

func runPreFilter(t *testing.T, f *fixture, nodes []fwk.NodeInfo, tests []preFilterCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.pod.Name, func(t *testing.T) {
			_, status := f.plugin.PreFilter(context.Background(), framework.NewCycleState(), tc.pod, nodes)
			if got := status.Code(); got != tc.code {
				t.Fatalf("code = %v, want %v (%v)", got, tc.code, status)
			}
			if tc.reason != "" && status.Message() != tc.reason {
				t.Errorf("reason = %q, want %q", status.Message(), tc.reason)
			}
		})
	}
}

func TestPreFilter(t *testing.T) {
	pods := []*v1.Pod{
		member("solo", "", ""),
		member("lost-0", "missing", "1"),
		member("small-0", "small", "1"), member("small-1", "small", "1"),
		member("ok-0", "ok", "1"), member("ok-1", "ok", "1"),
		member("big-0", "big", "4"), member("big-1", "big", "4"), member("big-2", "big", "4"),
		member("solo-0", "solo", "16"),
		st.MakePod().Namespace("default").Name("cpu-0").UID("cpu-0").Label(podgroup.LabelPodGroup, "cpu").
			Res(map[v1.ResourceName]string{v1.ResourceCPU: "96", podspec.ResourceGPU: "1"}).Obj(),
	}
	f := newFixture(t, pods, podgroup.New("default", "small", 4), podgroup.New("default", "ok", 2), podgroup.New("default", "big", 3),
		podgroup.New("default", "solo", 1), podgroup.New("default", "cpu", 1))
	nodes := []fwk.NodeInfo{gpuNode("n1", "8")}
	tests := []preFilterCase{
		{pods[0], fwk.Skip, ""},
		{pods[1], fwk.UnschedulableAndUnresolvable, "pod group default/missing not found (scheduler-plugins, scheduling.x-k8s.io/v1alpha1)"},
		{pods[2], fwk.UnschedulableAndUnresolvable, "gang default/small incomplete: 2/4 members"},
		{pods[4], fwk.Success, ""},
		// Every member exists; the refusal says what the gang waits for
		// and how many of its members the free capacity fits.
		{pods[6], fwk.Unschedulable, "gang default/big waits for GPUs: free capacity fits 2/3 members"},
		{pods[9], fwk.Unschedulable, "gang default/solo waits for GPUs: free capacity fits 0/1 members"},
		{pods[10], fwk.Unschedulable, "gang default/cpu waits for CPU or memory: free capacity fits 0/1 members"},
	}
	runPreFilter(t, f, nodes, tests)
}

// TestPostFilterGivesNoEmptyReason: a one-member gang's PostFilter, with
// nothing to release, leaves the pod to preemption and adds no reason: the
// framework joins the PostFilter plugins' reasons with ", ", and an empty
// one put ". , preemption: " into the pod's FailedScheduling message.
func TestPostFilterGivesNoEmptyReason(t *testing.T) {
	pod := member("solo-0", "solo", "16")
	f := newFixture(t, []*v1.Pod{pod}, podgroup.New("default", "solo", 1))
	_, status := f.plugin.PostFilter(context.Background(), framework.NewCycleState(), pod, nil)
	if status.Code() != fwk.Unschedulable || len(status.Reasons()) != 0 {
		t.Errorf("PostFilter = %v %q, want Unschedulable with no reasons", status.Code(), status.Reasons())
	}
}

func workloadMember(name, group, gpus string) *v1.Pod {
	p := member(name, "", gpus)
	p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &group}
	return p
}

// A Workload API gang is admitted as a PodGroup of the same size is: the
// same refusals and reasons, gang.minCount read as minMember; the basic
// policy is no gang; a pod naming a group in both APIs is refused.
func TestPreFilterWorkloadAPI(t *testing.T) {
	pods := []*v1.Pod{
		workloadMember("lost-0", "missing", "1"),
		workloadMember("small-0", "small", "1"), workloadMember("small-1", "small", "1"),
		workloadMember("ok-0", "ok", "1"), workloadMember("ok-1", "ok", "1"),
		workloadMember("big-0", "big", "4"), workloadMember("big-1", "big", "4"), workloadMember("big-2", "big", "4"),
		workloadMember("basic-0", "basic", "1"),
		workloadMember("both-0", "ok", "1"),
	}
	pods[9].Labels = map[string]string{podgroup.LabelPodGroup: "crd"}
	_, small := podgroup.NewWorkload("default", "small", 4)
	_, ok := podgroup.NewWorkload("default", "ok", 2)
	_, big := podgroup.NewWorkload("default", "big", 3)
	_, basic := podgroup.NewWorkload("default", "basic", 1)
	basic.Spec.SchedulingPolicy = schedulingv1beta1.PodGroupSchedulingPolicy{Basic: &schedulingv1beta1.BasicSchedulingPolicy{}}
	f := newFixtureWith(t, pods, []*schedulingv1beta1.PodGroup{small, ok, big, basic}, podgroup.New("default", "crd", 1))
	nodes := []fwk.NodeInfo{gpuNode("n1", "8")}
	tests := []preFilterCase{
		{pods[0], fwk.UnschedulableAndUnresolvable, "pod group default/missing not found (Workload API, scheduling.k8s.io/v1beta1)"},
		{pods[1], fwk.UnschedulableAndUnresolvable, reasons.GangIncomplete("default", "small", 2, 4)},
		{pods[3], fwk.Success, ""},
		{pods[5], fwk.Unschedulable, "gang default/big waits for GPUs: free capacity fits 2/3 members"},
		{pods[8], fwk.Skip, ""},
		{pods[9], fwk.UnschedulableAndUnresolvable, `pod default/both-0: belongs to scheduler-plugins PodGroup "crd" (label scheduling.x-k8s.io/pod-group) and to Workload API PodGroup "ok" (spec.schedulingGroup.podGroupName); a pod may belong to one gang, declared one way`},
	}
	runPreFilter(t, f, nodes, tests)
}

func TestPermitHoldsUntilMinMember(t *testing.T) {
	pods := []*v1.Pod{member("ok-0", "ok", "1"), member("ok-1", "ok", "1")}
	f := newFixture(t, pods, podgroup.New("default", "ok", 2))
	nodes := []fwk.NodeInfo{gpuNode("n1", "8")}
	ctx := context.Background()
	want := []struct {
		code   fwk.Code
		reason string
	}{
		{fwk.Wait, reasons.GangIncomplete("default", "ok", 1, 2)},
		{fwk.Success, ""},
	}
	for i, pod := range pods {
		state := framework.NewCycleState()
		if _, s := f.plugin.PreFilter(ctx, state, pod, nodes); !s.IsSuccess() {
			t.Fatalf("%s: PreFilter: %v", pod.Name, s)
		}
		if s := f.plugin.Reserve(ctx, state, pod, "n1"); !s.IsSuccess() {
			t.Fatalf("%s: Reserve: %v", pod.Name, s)
		}
		s, timeout := f.plugin.Permit(ctx, state, pod, "n1")
		if s.Code() != want[i].code || s.Message() != want[i].reason {
			t.Errorf("%s: Permit = %v %q, want %v %q", pod.Name, s.Code(), s.Message(), want[i].code, want[i].reason)
		}
		if s.Code() == fwk.Wait && timeout != 60*time.Second {
			t.Errorf("%s: Permit timeout = %v, want the default 60s", pod.Name, timeout)
		}
	}
}

// A member on its way out counts toward its gang's quorum no more than one
// that is gone: neither one being evicted (DisruptionTarget written, its
// deletion to come) nor one deleted and in its grace period. A member
// placed in their stead is refused while the gang lacks members, then
// waits at Permit for the gang's other new member rather than being let
// through to bind beside pods that are leaving.
func TestLeavingMembersMakeNoQuorum(t *testing.T) {
	now := metav1.Now()
	evicted, deleted := member("train-0", "train", "4"), member("train-1", "train", "4")
	evicted.Spec.NodeName, deleted.Spec.NodeName = "n1", "n1"
	evicted.Status.Conditions = []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonPreemptionByScheduler}}
	deleted.DeletionTimestamp = &now
	first, second := member("train-1-r1", "train", "4"), member("train-0-r1", "train", "4")
	f := newFixture(t, []*v1.Pod{evicted, deleted, first}, podgroup.New("default", "train", 2))
	nodes := []fwk.NodeInfo{gpuNode("n1", "8", evicted, deleted), gpuNode("n2", "8")}
	runPreFilter(t, f, nodes, []preFilterCase{{first, fwk.UnschedulableAndUnresolvable, reasons.GangIncomplete("default", "train", 1, 2)}})

	ctx := context.Background()
	if _, err := f.client.CoreV1().Pods("default").Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.mgr.Count("default/train").All == 2, nil
	}); err != nil {
		t.Fatalf("members counted: %+v, want 2 once %s exists", f.mgr.Count("default/train"), second.Name)
	}
	state := framework.NewCycleState()
	if _, s := f.plugin.PreFilter(ctx, state, first, nodes); !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s)
	}
	if s := f.plugin.Reserve(ctx, state, first, "n2"); !s.IsSuccess() {
		t.Fatalf("Reserve: %v", s)
	}
	if s, _ := f.plugin.Permit(ctx, state, first, "n2"); s.Code() != fwk.Wait || s.Message() != reasons.GangIncomplete("default", "train", 1, 2) {
		t.Errorf("Permit = %v %q, want Wait for the gang's other new member", s.Code(), s.Message())
	}
}

// A member released after the scheduler nominated it to its node
// (NominatedNodeNameForExpectation) has the nomination cleared when its
// reservation is returned, though the pod object the plugin is handed,
// read before that write, carries none: the write is the scheduler's,
// made just before the member waited at Permit.
func TestUnreserveClearsTheNomination(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.NominatedNodeNameForExpectation, true)
	held, seen := member("ok-0", "ok", "1"), member("ok-0", "ok", "1")
	held.Status.NominatedNodeName = "n1"
	f := newFixture(t, []*v1.Pod{held, member("ok-1", "ok", "1")}, podgroup.New("default", "ok", 2))
	ctx := context.Background()
	state := framework.NewCycleState()
	if _, s := f.plugin.PreFilter(ctx, state, seen, []fwk.NodeInfo{gpuNode("n1", "8")}); !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s)
	}
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
		t.Fatalf("released member still nominated to %q", nnn)
	}
}

// The manager keeps nothing about a gang once its members are bound, or
// gone: state does not grow with the number of gangs ever seen.
func TestManagerForgetsFinishedGangs(t *testing.T) {
	pods := []*v1.Pod{member("a-0", "a", "1"), member("a-1", "a", "1"), member("b-0", "b", "1"), member("b-1", "b", "1")}
	f := newFixture(t, pods, podgroup.New("default", "a", 2), podgroup.New("default", "b", 2))
	nodes := []fwk.NodeInfo{gpuNode("n1", "8")}
	ctx := context.Background()
	for _, pod := range pods {
		state := framework.NewCycleState()
		if _, s := f.plugin.PreFilter(ctx, state, pod, nodes); !s.IsSuccess() {
			t.Fatalf("%s: PreFilter: %v", pod.Name, s)
		}
		f.plugin.Reserve(ctx, state, pod, "n1")
	}
	if got := f.mgr.Tracked(); got != 2 {
		t.Fatalf("tracked gangs = %d, want 2", got)
	}
	// Gang a binds; gang b is deleted.
	for _, pod := range pods[:2] {
		bound := pod.DeepCopy()
		bound.Spec.NodeName = "n1"
		if _, err := f.client.CoreV1().Pods("default").Update(ctx, bound, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pod := range pods[2:] {
		if err := f.client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.mgr.Tracked() == 0, nil
	})
	if err != nil {
		t.Fatalf("tracked gangs = %d after gang a bound and gang b was deleted, want 0", f.mgr.Tracked())
	}
}

// Members wait at Permit for the timeout the simulator replays: the
// profile's, read through scoring.Params, where 0 means
// scoring.DefaultGangTimeout on both sides; a PodGroup's own
// scheduleTimeoutSeconds still wins live.
func TestPermitTimeoutIsTheProfiles(t *testing.T) {
	tests := []struct {
		name    string
		profile int
		own     int32
		want    time.Duration
	}{
		{"profile 0 is the default", 0, 0, scoring.DefaultGangTimeout},
		{"profile 300", 300, 0, 300 * time.Second},
		{"the PodGroup's own", 300, 7, 7 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods := []*v1.Pod{member("m-0", "m", "1"), member("m-1", "m", "1")}
			pg := podgroup.New("default", "m", 2)
			if tc.own > 0 {
				pg.Spec.ScheduleTimeoutSeconds = &tc.own
			}
			f := newFixture(t, pods, pg)
			holder := profilewatch.NewHolder()
			doc := profile.Default()
			doc.Name, doc.GangTimeoutSeconds = "timeout", tc.profile
			data, err := doc.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := holder.Apply(data); err != nil {
				t.Fatal(err)
			}
			if tc.own == 0 && holder.Load().Params.EffectiveGangTimeout() != tc.want {
				t.Fatalf("the replayed timeout is %v, want %v", holder.Load().Params.EffectiveGangTimeout(), tc.want)
			}
			p, err := gang.New(nil, f.mgr, holder, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, state := context.Background(), framework.NewCycleState()
			if _, s := p.PreFilter(ctx, state, pods[0], []fwk.NodeInfo{gpuNode("n1", "8")}); !s.IsSuccess() {
				t.Fatalf("PreFilter: %v", s)
			}
			p.Reserve(ctx, state, pods[0], "n1")
			if s, timeout := p.Permit(ctx, state, pods[0], "n1"); s.Code() != fwk.Wait || timeout != tc.want {
				t.Errorf("Permit = %v, %v; want Wait, %v", s.Code(), timeout, tc.want)
			}
		})
	}
}

func TestArgsRefuseAPluginTimeout(t *testing.T) {
	err := gang.ValidateArgs(gang.Args{TimeoutSeconds: 60, BackoffSeconds: 2})
	if err == nil || !strings.Contains(err.Error(), "timeoutSeconds: 60 is no longer read; set gangTimeoutSeconds in the SchedulingProfile") {
		t.Errorf("ValidateArgs = %v", err)
	}
}

// A Workload API gang tried and refused waits at PreEnqueue until one of
// the plugin's registered events wakes it; a scheduler-plugins gang's pods
// are never held there (the scheduler keeps them in its unschedulable pool
// itself), nor is a Workload API gang that was not tried.
func TestPreEnqueueHoldsATriedWorkloadGangUntilWoken(t *testing.T) {
	pods := []*v1.Pod{
		workloadMember("big-0", "big", "8"), workloadMember("big-1", "big", "8"),
		member("crd-0", "crd", "8"), member("crd-1", "crd", "8"),
	}
	_, big := podgroup.NewWorkload("default", "big", 2)
	f := newFixtureWith(t, pods, []*schedulingv1beta1.PodGroup{big}, podgroup.New("default", "crd", 2))
	ctx := context.Background()
	if s := f.plugin.PreEnqueue(ctx, pods[0]); !s.IsSuccess() {
		t.Fatalf("untried Workload API gang held at PreEnqueue: %v", s)
	}
	nodes := []fwk.NodeInfo{gpuNode("n1", "8")}
	for _, p := range []*v1.Pod{pods[0], pods[2]} {
		if _, s := f.plugin.PreFilter(ctx, framework.NewCycleState(), p, nodes); s.Code() != fwk.Unschedulable {
			t.Fatalf("%s: PreFilter %v, want Unschedulable (two 8-GPU members, one 8-GPU node)", p.Name, s)
		}
	}
	for _, p := range pods[:2] {
		if s := f.plugin.PreEnqueue(ctx, p); s.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(s.Message(), "default/big") {
			t.Fatalf("%s: tried Workload API gang passed PreEnqueue before any event: %v", p.Name, s)
		}
	}
	if s := f.plugin.PreEnqueue(ctx, pods[2]); !s.IsSuccess() {
		t.Fatalf("scheduler-plugins gang held at PreEnqueue: %v", s)
	}
	events, err := f.plugin.EventsToRegister(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.QueueingHintFn == nil {
			t.Fatalf("event %v has no hint to end the gate", e.Event)
		}
	}
	// An assigned pod deleted: the scheduler asks the hint, which queues
	// the member and ends its gang's gate.
	if h, err := events[1].QueueingHintFn(klog.Background(), pods[1], member("gone", "", "8"), nil); err != nil || h != fwk.Queue {
		t.Fatalf("hint = %v, %v; want Queue", h, err)
	}
	for _, p := range pods[:2] {
		if s := f.plugin.PreEnqueue(ctx, p); !s.IsSuccess() {
			t.Fatalf("%s: held at PreEnqueue after a waking event: %v", p.Name, s)
		}
	}

	// Tried and held again; a bound pod's deletion seen by the informer
	// alone (no hint) ends the hold and, the gang being still held in the
	// pool, activates it core.WakeCheck later.
	if _, s := f.plugin.PreFilter(ctx, framework.NewCycleState(), pods[0], nodes); s.Code() != fwk.Unschedulable {
		t.Fatalf("PreFilter %v", s)
	}
	if s := f.plugin.PreEnqueue(ctx, pods[0]); s.IsSuccess() {
		t.Fatal("tried gang not held")
	}
	running := member("running", "", "8")
	running.Spec.NodeName = "n1"
	if _, err := f.client.CoreV1().Pods("default").Create(ctx, running, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.client.CoreV1().Pods("default").Delete(ctx, "running", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		f.h.mu.Lock()
		defer f.h.mu.Unlock()
		return slices.Contains(f.h.activated, "default/big-1"), nil
	}); err != nil {
		t.Fatalf("held gang not activated after capacity was freed: %v (activated %v)", err, f.h.activated)
	}
}

// A freed node seen while a Workload API gang's pod-group cycle runs ends
// its gate for good: the members whose PreFilter runs after the wake do not
// record the gang as tried again, so the gang, its cycle failed on the
// snapshot taken before the node was freed, is not held at PreEnqueue.
func TestWakeDuringAPodGroupCycleIsKept(t *testing.T) {
	pods := []*v1.Pod{workloadMember("big-0", "big", "8"), workloadMember("big-1", "big", "8")}
	_, big := podgroup.NewWorkload("default", "big", 2)
	f := newFixtureWith(t, pods, []*schedulingv1beta1.PodGroup{big})
	ctx := context.Background()
	nodes := []fwk.NodeInfo{gpuNode("n1", "8")}
	group := framework.NewCycleState()
	inCycle := func() *framework.CycleState {
		s := framework.NewCycleState()
		s.SetPodGroupSchedulingCycle(group)
		return s
	}
	if _, s := f.plugin.PreFilter(ctx, inCycle(), pods[0], nodes); s.Code() != fwk.Unschedulable {
		t.Fatalf("big-0: PreFilter %v, want Unschedulable (two 8-GPU members, one 8-GPU node)", s)
	}
	events, err := f.plugin.EventsToRegister(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// An assigned pod deleted while the cycle runs.
	if h, err := events[1].QueueingHintFn(klog.Background(), pods[1], member("gone", "", "8"), nil); err != nil || h != fwk.Queue {
		t.Fatalf("hint = %v, %v; want Queue", h, err)
	}
	if _, s := f.plugin.PreFilter(ctx, inCycle(), pods[1], nodes); s.Code() != fwk.Unschedulable {
		t.Fatalf("big-1: PreFilter %v, want Unschedulable", s)
	}
	for _, p := range pods {
		if s := f.plugin.PreEnqueue(ctx, p); !s.IsSuccess() {
			t.Fatalf("%s: held at PreEnqueue though capacity was freed during its cycle: %v", p.Name, s)
		}
	}
	// The next cycle, on a snapshot with the freed node, records it again.
	group = framework.NewCycleState()
	if _, s := f.plugin.PreFilter(ctx, inCycle(), pods[0], nodes); s.Code() != fwk.Unschedulable {
		t.Fatalf("PreFilter %v", s)
	}
	if s := f.plugin.PreEnqueue(ctx, pods[0]); s.IsSuccess() {
		t.Fatal("gang tried in a new cycle and refused is not held")
	}
}

// The reservation book wakes the pods it turned away through the gang
// manager when its reservation moves or ends: a Workload API gang held at
// PreEnqueue since its cycle failed (a tried gang nothing woke) passes
// PreEnqueue on the way in, where the handle's Activate alone would have
// it meet the gate and go back to the pool.
func TestActivateThroughTheManagerEndsTheGate(t *testing.T) {
	pods := []*v1.Pod{workloadMember("big-0", "big", "8"), workloadMember("big-1", "big", "8")}
	_, big := podgroup.NewWorkload("default", "big", 2)
	f := newFixtureWith(t, pods, []*schedulingv1beta1.PodGroup{big})
	ctx := t.Context()
	if _, s := f.plugin.PreFilter(ctx, framework.NewCycleState(), pods[0], []fwk.NodeInfo{gpuNode("n1", "8")}); s.Code() != fwk.Unschedulable {
		t.Fatalf("PreFilter %v, want Unschedulable (two 8-GPU members, one 8-GPU node)", s)
	}
	if s := f.plugin.PreEnqueue(ctx, pods[0]); s.IsSuccess() {
		t.Fatal("a tried Workload API gang nothing woke passed PreEnqueue")
	}
	f.mgr.Activate(klog.Background(), map[string]*v1.Pod{"default/big-0": pods[0], "default/big-1": pods[1]})
	f.h.mu.Lock()
	activated := slices.Clone(f.h.activated)
	f.h.mu.Unlock()
	if !slices.Contains(activated, "default/big-0") || !slices.Contains(activated, "default/big-1") {
		t.Fatalf("activated %v, want both members", activated)
	}
	for _, p := range pods {
		if s := f.plugin.PreEnqueue(ctx, p); !s.IsSuccess() {
			t.Fatalf("%s: held at PreEnqueue after the manager activated it: %v", p.Name, s)
		}
	}
}
