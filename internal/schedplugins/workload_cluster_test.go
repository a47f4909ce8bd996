package schedplugins_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/player"
	"github.com/schedloop/schedloop/internal/podgroup"
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
	w, pg := podgroup.NewWorkload(ns, name, int32(members))
	if err := podgroup.CreateWorkload(e.t.Context(), e.c.Client, w, pg); err != nil {
		e.t.Fatal(err)
	}
	for i := range members {
		e.pod(fmt.Sprintf("%s-%d", name, i), scheduler, gpus, append([]podOpt{inWorkload(name)}, opts...)...)
	}
}

// waitReasonOf waits for a FailedScheduling event on any pod named prefix*
// whose note contains want. Within the scheduler's pod-group cycle the
// members after the first refused one carry the in-tree GangScheduling
// plugin's summary instead, so which member says it first is not fixed.
func (e *env) waitReasonOf(prefix, want string) string {
	e.t.Helper()
	return e.waitEvent(prefix+"*", want, func(name string) bool { return strings.HasPrefix(name, prefix) })
}

// All or nothing: 64 one-GPU members with 56 GPUs free bind none, and all
// 64 once the blocker leaves.
func TestWorkloadGang64WholeOrNothing(t *testing.T) {
	e := newEnv(t, gpuNodes("n", 8, nil), "")
	e.pod("blocker", ours, 8)
	e.waitBound("blocker", 1)

	e.workloadGang("big", ours, 64, 1)
	note := e.waitReasonOf("big-", "gang default/big incomplete: 56/64 members")
	t.Logf("ours with 56 GPUs free: %s", note)
	if bound, _ := e.placement("big-"); len(bound) != 0 {
		t.Fatalf("our profile bound %d of 64 Workload API members with only 56 GPUs free", len(bound))
	}
	e.deletePods("blocker")
	bound := e.waitBound("big-", 64)
	if n := len(nodesOf(bound)); n != 8 {
		t.Fatalf("64 one-GPU members on %d nodes, want 8", n)
	}
}

// Reserved: two Workload API gangs that cannot both fit; one runs, the other
// waits holding nothing, then runs when the first finishes.
func TestWorkloadGangsCompeteWithoutDeadlock(t *testing.T) {
	e := newEnv(t, gpuNodes("n", 2, nil), "")
	e.workloadGang("a", ours, 2, 8)
	e.workloadGang("b", ours, 2, 8)
	winner, loser := e.oneGangWins("a", "b", 2)
	e.waitReasonOf(loser+"-", "gang default/"+loser+" incomplete: 0/2 members")
	if b, _ := e.placement(loser + "-"); len(b) != 0 {
		t.Fatalf("waiting gang %s has %d members bound", loser, len(b))
	}
	e.deletePods(winner + "-")
	e.waitBound(loser+"-", 2)
}

// One NVLink domain: a 4x8-GPU Workload API gang lands in r2a, the only
// domain that holds it whole; with r2a full, a gang whose pods require one
// NVLink domain waits with the topology reason.
func TestWorkloadGangLandsInOneNVLinkDomain(t *testing.T) {
	e := newEnv(t, rackNodes(), "")
	e.workloadGang("train", ours, 4, 8)
	bound := e.waitBound("train-", 4)
	want := []string{"h06", "h07", "h08", "h09"} // r2a
	if got := nodesOf(bound); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Workload API gang of 4x8 GPUs on %v, want NVLink domain r2a %v", got, want)
	}
	e.workloadGang("strict", ours, 4, 8, annotated("schedloop.io/topology-required", trace.LabelNVLinkDomain))
	note := e.waitReasonOf("strict-", "topology: gang needs 32 GPUs within one "+trace.LabelNVLinkDomain+"; largest free "+trace.LabelNVLinkDomain+" has 24")
	t.Logf("required level: %s", note)
	if b, _ := e.placement("strict-"); len(b) != 0 {
		t.Fatalf("required-level gang bound %d members", len(b))
	}
}

// Held at a queue limit: a queue of 16 GPUs runs one 2x8 Workload API gang
// and holds the second whole, charged at its declared size.
func TestWorkloadGangHeldAtQueueLimit(t *testing.T) {
	e := newEnv(t, gpuNodes("n", 4, nil), teamA16Profile)
	e.workloadGang("first", ours, 2, 8, inQueue("team-a"))
	e.waitBound("first-", 2)
	e.workloadGang("second", ours, 2, 8, inQueue("team-a"))
	e.waitReasonOf("second-", "queue team-a at limit 16 GPUs")
	if b, _ := e.placement("second-"); len(b) != 0 {
		t.Fatalf("second gang of a full queue has %d members bound", len(b))
	}
	e.deletePods("first-")
	e.waitBound("second-", 2)
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
// (-gang-api workload): a generated trace of lone pods and gangs replays
// through schedloop's profile to the end, every member naming its group in
// spec.schedulingGroup and none labelled for the PodGroup CRD.
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
		Queues: []string{"research"},
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
	if len(pgs.Items) != len(jobs) {
		t.Fatalf("%d Workload API PodGroups for %d jobs", len(pgs.Items), len(jobs))
	}
	if crd, err := podgroup.List(t.Context(), e.c.Dynamic, ns); err != nil || len(crd) != 0 {
		t.Fatalf("scheduler-plugins PodGroups: %d (%v), want none", len(crd), err)
	}
	t.Logf("%d jobs replayed as Workload API gangs in %v", len(rep.Jobs), rep.Ended.Sub(rep.Began).Round(time.Millisecond))
}
