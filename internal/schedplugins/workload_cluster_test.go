package schedplugins_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/player"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/schedplugins"
	"github.com/schedloop/schedloop/internal/trace"
)

// The PodGroup CRD's cluster tests, with gangs declared through the
// Kubernetes Workload API (scheduling.k8s.io/v1beta1): a Workload, the
// PodGroup made from its template, pods naming it in spec.schedulingGroup.

func inWorkload(name string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
	}
}

func (e *env) workloadGang(name, scheduler string, members int, gpus int64, opts ...podOpt) {
	e.t.Helper()
	e.workloadGangWith(nil, name, scheduler, members, gpus, opts...)
}

// workloadGangWith is workloadGang with labels on the Workload object.
func (e *env) workloadGangWith(labels map[string]string, name, scheduler string, members int, gpus int64, opts ...podOpt) {
	e.t.Helper()
	w, pg := podgroup.NewWorkload(ns, name, int32(members))
	w.Labels = labels
	if err := podgroup.CreateWorkload(e.t.Context(), e.c.Client, w, pg); err != nil {
		e.t.Fatal(err)
	}
	for i := range members {
		e.pod(fmt.Sprintf("%s-%d", name, i), scheduler, gpus, append([]podOpt{inWorkload(name)}, opts...)...)
	}
}

// waitReasonOf waits for a scheduling failure of any pod named prefix*
// whose message contains want (see waitEvent). Within the scheduler's
// pod-group cycle the members after the first refused one carry the
// in-tree GangScheduling plugin's summary instead, so which member says it
// first is not fixed.
func (e *env) waitReasonOf(prefix, want string) string {
	e.t.Helper()
	return e.waitEvent(prefix+"*", want, func(name string) bool { return strings.HasPrefix(name, prefix) })
}

// Held at a queue limit, declared either way: a queue of 16 GPUs runs one
// 2x8 gang and holds the second whole, charged at its declared size. The
// second Workload API gang names its queue on its Workload only, which its
// pods inherit (podspec.WithGroupMeta).
func TestGangHeldAtQueueLimit(t *testing.T) {
	e := newEnv(t, gpuNodes("n", 4, nil), teamA16Profile)
	for _, api := range gangAPIs {
		first, second := string(api)+"-first", string(api)+"-second"
		e.gangAs(api, first, ours, 2, 8, inQueue("team-a"))
		e.waitBound(first+"-", 2)
		if api == podgroup.APIWorkload {
			e.workloadGangWith(map[string]string{podspec.LabelQueue: "team-a"}, second, ours, 2, 8)
		} else {
			e.gangAs(api, second, ours, 2, 8, inQueue("team-a"))
		}
		e.waitGangReason(api, second, "queue team-a at limit 16 GPUs")
		if b, _ := e.placement(second + "-"); len(b) != 0 {
			t.Fatalf("%s: second gang of a full queue has %d members bound", api, len(b))
		}
		e.deletePods(first + "-")
		e.waitBound(second+"-", 2)
		e.deletePods(second + "-")
	}
}

// A pod that declares a gang both ways is refused, naming both.
func TestPodInBothGangAPIsIsRefused(t *testing.T) {
	e := newEnv(t, gpuNodes("n", 1, nil), "")
	w, pg := podgroup.NewWorkload(ns, "w", 1)
	if err := podgroup.CreateWorkload(t.Context(), e.c.Client, w, pg); err != nil {
		t.Fatal(err)
	}
	if _, err := podgroup.Create(t.Context(), e.c.Dynamic, podgroup.New(ns, "crd", 1)); err != nil {
		t.Fatal(err)
	}
	e.pod("both", ours, 1, inGang("crd"), inWorkload("w"))
	note := e.waitReason("both", `belongs to scheduler-plugins PodGroup "crd"`)
	if !strings.Contains(note, `Workload API PodGroup "w"`) {
		t.Fatalf("refusal %q does not name the Workload API group", note)
	}
	if b, _ := e.placement("both"); len(b) != 0 {
		t.Fatal("a pod declaring a gang both ways was bound")
	}
}

// The trace player declares each job through the Workload API
// (-gang-api workload): a generated trace of lone pods and gangs, some of
// them of a higher priority (which their PodGroup must carry too), replays
// through schedloop's profile to the end, a gang's every member naming its
// group in spec.schedulingGroup, none labelled for the PodGroup CRD, and a
// job of one pod declared as no group at all (a lone pod, as the simulator
// replays it).
func TestReplayWithWorkloadAPIGangs(t *testing.T) {
	clock, err := harness.NewClock(300)
	if err != nil {
		t.Fatal(err)
	}
	c := harness.NewForTest(t, harness.Options{WorkloadAPI: true})
	e := &env{t: t, c: c}
	if _, err := c.AddNodes(t.Context(), gpuNodes("n", 8, nil), harness.NodeOptions{NoExporters: true, Clock: clock}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartScheduler(t.Context(), harness.SchedulerOptions{
		Config: schedulerConfig(t, c.Kubeconfig), Plugins: schedplugins.Options(),
	}); err != nil {
		t.Fatal(err)
	}
	jobs := trace.Generate(trace.GenConfig{
		Seed: 5, Jobs: 30, MeanInterarrival: 10 * time.Second,
		MinDuration: time.Minute, MaxDuration: 5 * time.Minute,
		GangSizes: []int{1, 2, 4}, GPUsPerMember: []int{1, 4, 8},
		Queues: []string{"research"}, Priorities: []int32{0, 1},
	})
	p, err := player.New(e.c.Client, e.c.Dynamic, jobs, player.Options{Clock: clock, SchedulerName: ours, Namespace: ns, GangAPI: podgroup.APIWorkload})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	rep, err := p.Run(ctx)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	for _, r := range rep.Jobs {
		if !r.Done() {
			t.Errorf("job %s not done", r.Name)
		}
	}
	pgs, err := e.c.Client.SchedulingV1beta1().PodGroups(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gangs := 0
	for _, j := range jobs {
		if j.Members > 1 {
			gangs++
		}
	}
	if gangs == 0 || gangs == len(jobs) {
		t.Fatalf("the trace has %d gangs in %d jobs: it must hold both gangs and lone pods", gangs, len(jobs))
	}
	if len(pgs.Items) != gangs {
		t.Fatalf("%d Workload API PodGroups for %d gangs", len(pgs.Items), gangs)
	}
	if crd, err := podgroup.List(t.Context(), e.c.Dynamic, ns); err != nil || len(crd) != 0 {
		t.Fatalf("scheduler-plugins PodGroups: %d (%v), want none", len(crd), err)
	}
	t.Logf("%d jobs replayed as Workload API gangs in %v", len(rep.Jobs), rep.Ended.Sub(rep.Began).Round(time.Millisecond))
}

// A Workload API gang that no node takes waits at SchedloopGang's
// PreEnqueue for a cluster change. A node's taint lifted or a label added
// that the gang's pods select is such a change, as it is for the pods of a
// scheduler-plugins gang that TaintToleration or NodeAffinity turned down:
// the gang is placed then, not after core.GateLimit.
func TestWorkloadGangWakesOnNodeChange(t *testing.T) {
	e := newEnv(t, gpuNodes("n", 2, nil), "")
	nodes := e.c.Client.CoreV1().Nodes()
	update := func(name string, change func(*corev1.Node)) {
		t.Helper()
		n, err := nodes.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(n)
		if _, err := nodes.Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"n00", "n01"}
	drain := corev1.Taint{Key: "schedloop.io/drain", Effect: corev1.TaintEffectNoSchedule}
	for _, n := range names {
		update(n, func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, drain) })
	}
	e.workloadGang("tainted", ours, 2, 8)
	e.waitReasonOf("tainted-", "untolerated taint")
	e.waitGated("tainted", 2)
	for _, n := range names {
		update(n, func(n *corev1.Node) { n.Spec.Taints = nil })
	}
	e.waitBound("tainted-", 2)
	e.deletePods("tainted-")

	e.workloadGang("selecting", ours, 2, 8, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"pool": "train"} })
	e.waitReasonOf("selecting-", "didn't match Pod's node affinity/selector")
	e.waitGated("selecting", 2)
	for _, n := range names {
		update(n, func(n *corev1.Node) { n.Labels["pool"] = "train" })
	}
	e.waitBound("selecting-", 2)
}

// waitGated waits until the scheduler holds the Workload API gang's
// members behind a PreEnqueue gate (SchedloopGang's, once the gang has been
// tried): its gauge of gated pods counts them.
func (e *env) waitGated(name string, members int) {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("gang %s's %d members gated", name, members), func() bool {
		v, err := testutil.GetGaugeMetricValue(schedmetrics.GatedPods())
		return err == nil && int(v) >= members
	})
}

// A lone pod preempts a Workload API gang as it does a PodGroup gang:
// the whole gang, both members on both nodes, though it needs one node's
// GPUs only (podspec.GangKey reads spec.schedulingGroup).
func TestLonePodEvictsWholeWorkloadGang(t *testing.T) {
	set := schedplugins.NewSet()
	e := newEnvWith(t, gpuNodes("w", 2, nil), "", set)
	e.priorityClass("test-high", 1000)
	e.setProfileWithTable(set, "whole", "name: whole\n"+orderDoc, 8, nil)
	e.workloadGang("wl", ours, 2, 8)
	if n := nodesOf(e.waitBound("wl-", 2)); len(n) != 2 {
		t.Fatalf("the gang is on %v, want a member on each node", n)
	}
	e.ranFor(time.Hour, "wl-0", "wl-1")
	e.pod("urgent", ours, 8, withPriority("test-high"))
	e.waitBound("urgent", 1)
	e.gone("wl-0", "wl-1")
	if got := e.preempted("urgent", 2); !slices.Equal(got, []string{"wl-0", "wl-1"}) {
		t.Errorf("preempted for urgent: %v, want both gang members", got)
	}
	for _, c := range e.causes("default/urgent") {
		if c.Job != "default/wl" {
			t.Errorf("cause %+v, want job default/wl", c)
		}
	}
}
