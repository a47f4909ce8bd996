package schedplugins_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/schedplugins"
)

// A 64-pod gang on 8-GPU nodes lands whole or not at all, declared either
// way; the stock profile binds what fits and leaves the rest pending while
// holding GPUs.
func TestGang64WholeOrNothing(t *testing.T) {
	for _, api := range gangAPIs {
		t.Run(string(api), func(t *testing.T) {
			e := newEnv(t, gpuNodes("n", 8, nil), "")
			e.pod("blocker", ours, 8)
			e.waitBound("blocker", 1)

			e.gangAs(api, "big", ours, 64, 1)
			note := e.waitGangReason(api, "big", "gang default/big waits for GPUs: free capacity fits 56/64 members")
			t.Logf("ours with 56 GPUs free: %s", note)
			if bound, _ := e.placement("big-"); len(bound) != 0 {
				t.Fatalf("our profile bound %d of 64 members with only 56 GPUs free", len(bound))
			}

			if api == podgroup.APIPodGroup {
				e.gang("stock", stock, 64, 1, 0)
				e.waitBound("stock-", 56)
				stockBound, stockPending := e.placement("stock-")
				t.Logf("stock profile on the same workload: %d bound, %d pending (a partial gang holding 56 GPUs)", len(stockBound), stockPending)
				if len(stockBound) != 56 || stockPending != 8 {
					t.Fatalf("stock profile: %d bound, %d pending; want the partial 56/8", len(stockBound), stockPending)
				}
				e.deletePods("stock-")
			}
			e.deletePods("blocker")

			bound := e.waitBound("big-", 64)
			if n := len(nodesOf(bound)); n != 8 {
				t.Fatalf("64 one-GPU members on %d nodes, want 8", n)
			}
			if api == podgroup.APIPodGroup {
				e.waitFor("PodGroup big status", func() bool {
					pg, err := podgroup.Get(t.Context(), e.c.Dynamic, ns, "big")
					return err == nil && pg.Status.Scheduled == 64 &&
						(pg.Status.Phase == podgroup.PhaseScheduled || pg.Status.Phase == podgroup.PhaseRunning)
				})
			}
		})
	}
}

// Two gangs that cannot both fit, declared either way: one runs, the other
// waits holding nothing, then runs when the first finishes. The stock
// profile splits the GPUs between them and neither completes.
func TestCompetingGangsDoNotDeadlock(t *testing.T) {
	e := newEnv(t, gpuNodes("n", 2, nil), "")
	for _, api := range gangAPIs {
		a, b := string(api)+"-a", string(api)+"-b"
		e.gangAs(api, a, ours, 2, 8)
		e.gangAs(api, b, ours, 2, 8)
		winner, loser := e.oneGangWins(a, b, 2)
		e.waitGangReason(api, loser, "gang default/"+loser+" waits for GPUs: free capacity fits 0/2 members")
		if b, _ := e.placement(loser + "-"); len(b) != 0 {
			t.Fatalf("%s: waiting gang %s has %d members bound", api, loser, len(b))
		}
		e.deletePods(winner + "-")
		e.waitBound(loser+"-", 2)
		e.deletePods(loser + "-")
	}

	// The stock profile, same workload, members arriving interleaved: each
	// gang's first member takes a node, and then its second finds none.
	// The second members are created once the first are bound, so the
	// interleaving does not depend on when the scheduler's cache sees the
	// deletions above (seen one node at a time, it could give both nodes
	// to one gang's members in a row).
	for _, g := range []string{"c", "d"} {
		e.pod(g+"-0", stock, 8, inGang(g))
	}
	e.waitBound("c-", 1)
	e.waitBound("d-", 1)
	for _, g := range []string{"c", "d"} {
		e.pod(g+"-1", stock, 8, inGang(g))
	}
	for _, g := range []string{"c", "d"} {
		e.waitReason(g+"-1", "Insufficient nvidia.com/gpu")
	}
	c, _ := e.placement("c-")
	d, _ := e.placement("d-")
	t.Logf("stock profile: gang c %d/2 bound, gang d %d/2 bound (each holds 8 GPUs; neither can complete)", len(c), len(d))
	if len(c) != 1 || len(d) != 1 {
		t.Fatalf("stock profile: c %d, d %d bound; want the 1/1 deadlock", len(c), len(d))
	}
}

// Members held at Permit are released when the gang times out: their GPUs
// go to a pod that needs them.
func TestGangTimeoutReleasesReservations(t *testing.T) {
	e := newEnv(t, gpuNodes("n", 3, nil), "")
	// Three members declared and room for them; the third is gated and never
	// reaches the scheduler, so the two others reserve two nodes and wait.
	pg := podgroup.New(ns, "slow", 3)
	pg.Spec.ScheduleTimeoutSeconds = ptr.To[int32](2)
	if _, err := podgroup.Create(t.Context(), e.c.Dynamic, pg); err != nil {
		t.Fatal(err)
	}
	e.pod("slow-0", ours, 8, inGang("slow"))
	e.pod("slow-1", ours, 8, inGang("slow"))
	e.pod("slow-gated", ours, 8, inGang("slow"), gated)
	e.waitFor("gang slow holding both nodes", func() bool {
		g, err := podgroup.Get(t.Context(), e.c.Dynamic, ns, "slow")
		return err == nil && g.Status.Scheduled == 2
	})
	e.waitReason("slow-0", "gang default/slow incomplete: ")
	for _, name := range []string{"needy-a", "needy-b", "needy-c"} {
		e.pod(name, ours, 8)
	}
	e.waitBound("needy-", 3)
	if b, _ := e.placement("slow-"); len(b) != 0 {
		t.Fatalf("timed-out gang has %d members bound", len(b))
	}
}

// Only lone pods preempt (scoring.PreemptsFor), as the simulator replays: a
// high-priority gang that finds no room waits rather than have
// DefaultPreemption evict pods for one member at a time, and a
// high-priority lone pod still evicts.
func TestOnlyLonePodsPreempt(t *testing.T) {
	e := newEnv(t, gpuNodes("n", 2, nil), "")
	high := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000}
	if err := harness.CreatePriorityClass(t.Context(), e.c.Client, ns, high); err != nil {
		t.Fatal(err)
	}
	atHigh := func(p *corev1.Pod) { p.Spec.PriorityClassName = "high" }
	e.pod("low-0", ours, 8)
	e.pod("low-1", ours, 8)
	e.waitBound("low-", 2)

	e.gang("hi", ours, 2, 4, 0, atHigh)
	note := e.waitReason("hi-0", "gang default/hi does not preempt")
	t.Logf("gang at high priority: %s", note)
	if bound, _ := e.placement("low-"); len(bound) != 2 {
		t.Fatalf("low-priority pods bound after the gang's attempt: %v, want both", bound)
	}
	evs, err := e.c.Client.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Reason == "Preempted" {
			t.Fatalf("%s was preempted for %v: a gang's member must not preempt", ev.Regarding.Name, ev.Related)
		}
	}
	e.deletePods("hi-")

	e.pod("lone", ours, 8, atHigh)
	e.waitBound("lone", 1)
	if bound, _ := e.placement("low-"); len(bound) != 1 {
		t.Fatalf("after the lone high-priority pod: low-priority pods bound %v, want one evicted", bound)
	}
}

// oneGangWins waits until all members of gang a or of gang b are bound and
// names that gang and the other.
func (e *env) oneGangWins(a, b string, members int) (winner, loser string) {
	e.t.Helper()
	e.waitFor("one gang bound", func() bool {
		boundA, _ := e.placement(a + "-")
		boundB, _ := e.placement(b + "-")
		switch {
		case len(boundA) == members:
			winner, loser = a, b
		case len(boundB) == members:
			winner, loser = b, a
		}
		return winner != ""
	})
	return winner, loser
}

// A gang admitted on capacity whose last member finds no node (a taint the
// fit cannot see) is released whole, declared either way, with the reason
// naming how many members were placed before the failure: for a Workload
// API gang by its pod-group cycle's PodGroupPostFilter, since the
// scheduler runs no PostFilter for the pods of that cycle. Nothing stays
// held: a lone pod takes a node the gang tried, and once capacity is freed
// and the taint gone the gang is tried again and lands whole.
func TestGangReleasedWhenAMemberFindsNoNode(t *testing.T) {
	e := newEnv(t, gpuNodes("n", 3, nil), "")
	for _, api := range gangAPIs {
		name := string(api) + "-tri"
		e.maintenance("n02", true)
		e.gangAs(api, name, ours, 3, 8)
		note := e.waitGangReason(api, name, "gang default/"+name+" incomplete: 2/3 members")
		t.Logf("%s: %s", api, note)
		if b, _ := e.placement(name + "-"); len(b) != 0 {
			t.Fatalf("%s: %d members of a gang missing one bound", api, len(b))
		}
		e.pod("lone", ours, 8)
		e.waitBound("lone", 1)

		e.maintenance("n02", false)
		e.deletePods("lone")
		if n := len(nodesOf(e.waitBound(name+"-", 3))); n != 3 {
			t.Fatalf("%s: gang of 3x8 GPUs on %d nodes", api, n)
		}
		e.deletePods(name + "-")
	}
}

// With NominatedNodeNameForExpectation on (kube-scheduler's default), a
// member held at Permit is written as nominated to its node. A released
// gang's members carry no nomination while they wait out the backoff:
// the scheduler would otherwise count each on its old node for every other
// pod, its gang's own later members included, and try it there first when
// the gang comes back. Then, the tainted node freed, the gang lands whole.
func TestReleasedGangMembersKeepNoNomination(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.NominatedNodeNameForExpectation, true)
	// A long backoff holds the released gang still while it is looked at.
	const backoff = 30 * time.Second
	e := newEnvConfigured(t, gpuNodes("n", 4, nil), "", schedplugins.NewSet(), func(config string) string {
		return strings.Replace(config, "backoffSeconds: 2", "backoffSeconds: 30", 1)
	})
	ctx := t.Context()
	// The plan counts n03's GPUs; the taint turns its members away, so
	// the thirteenth member finds no node and the twelve placed, each
	// nominated to its node while held, are released.
	e.maintenance("n03", true)
	e.gang("g", ours, 16, 2, 0)
	t.Log(e.waitEvent("g-*", "gang default/g incomplete: 12/16 members", func(name string) bool { return strings.HasPrefix(name, "g-") }))
	// Within the backoff: once it ends the gang is placed, and nominated,
	// again.
	var held []string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, backoff*2/3, true, func(context.Context) (bool, error) {
		pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		held = nil
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Name, "g-") && (p.Spec.NodeName != "" || p.Status.NominatedNodeName != "") {
				held = append(held, p.Name+" on "+p.Spec.NodeName+p.Status.NominatedNodeName)
			}
		}
		return len(held) == 0, nil
	}); err != nil {
		t.Fatalf("released gang's members still bound or nominated: %v", held)
	}
	e.maintenance("n03", false)
	bound := e.waitBound("g-", 16)
	perNode := map[string]int{}
	for _, n := range bound {
		perNode[n]++
	}
	for _, n := range []string{"n00", "n01", "n02", "n03"} {
		if perNode[n] != 4 {
			t.Fatalf("16x2-GPU gang placed %v, want four members on each 8-GPU node", perNode)
		}
	}
}

// maintenance sets node's taints to a NoSchedule maintenance taint (on)
// or to none.
func (e *env) maintenance(node string, on bool) {
	e.t.Helper()
	ctx := e.t.Context()
	n, err := e.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	n.Spec.Taints = nil
	if on {
		n.Spec.Taints = []corev1.Taint{{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule}}
	}
	if _, err := e.c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}
