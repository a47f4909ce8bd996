package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/kueuereplay"
	"github.com/schedloop/schedloop/internal/scoring"
)

var gpuFR = scoring.FlavorResource{Flavor: "h100", Resource: "nvidia.com/gpu"}

func kueueJob(queue string, gpus int64) KueueJob {
	return KueueJob{Queue: queue, Req: map[scoring.FlavorResource]int64{gpuFR: gpus * 1000}}
}

func teams(borrowLimit int64) scoring.KueueCohort {
	var c scoring.KueueCohort
	for _, name := range []string{"team-a", "team-b"} {
		q := scoring.KueueQuota{Nominal: 16000, BorrowingLimit: new(borrowLimit * 1000)}
		c = append(c, &scoring.KueueClusterQueue{Name: name, Cohort: "research",
			Quotas: map[scoring.FlavorResource]scoring.KueueQuota{gpuFR: q}, Usage: map[scoring.FlavorResource]int64{}})
	}
	return c
}

// TestRunBehindKueueGatesOnQuota: with room in the cluster for both, a
// team's second job waits for its first to finish when its ClusterQueue may
// not borrow, and starts at once when it may; a job outside Kueue is not
// held.
func TestRunBehindKueueGatesOnQuota(t *testing.T) {
	jobs := []Job{job("a1", 0, 3600, 2, 8), job("a2", 10, 3600, 2, 8), job("free", 10, 60, 1, 8), job("huge", 20, 60, 5, 8)}
	front := func(borrow int64) KueueFront {
		return KueueFront{Cohort: teams(borrow), Jobs: map[string]KueueJob{"a1": kueueJob("team-a", 16), "a2": kueueJob("team-a", 16),
			"huge": kueueJob("team-a", 40)}}
	}
	held, err := Run(cluster(6, 8), jobs, Config{Params: scoring.DefaultParams(), Kueue: new(front(0))})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := starts(held), []time.Duration{sec(0), sec(3600), sec(10), 0}; !slices.Equal(got, want) {
		t.Errorf("no borrowing: starts %v, want %v (a2 after a1 frees team-a's quota, free at its arrival)", got, want)
	}
	if _, ok := held.Kueue.Admitted["huge"]; ok || held.Jobs[3].State != Unfinished || held.Metrics.Unfinished != 1 || held.Metrics.Jobs != 4 {
		t.Errorf("huge, beyond team-a's quota: admitted %v, %+v, metrics %+v; want never admitted, unfinished", ok, held.Jobs[3], held.Metrics)
	}
	if w := held.Kueue.Quota.QuotaWait["a2"]; w != sec(3590) {
		t.Errorf("no borrowing: a2 waited %v for quota, want 59m50s", w)
	}
	lent, err := Run(cluster(6, 8), jobs, Config{Params: scoring.DefaultParams(), Kueue: new(front(16))})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := starts(lent), []time.Duration{sec(0), sec(10), sec(10), 0}; !slices.Equal(got, want) {
		t.Errorf("borrowing up to 16: starts %v, want %v", got, want)
	}
	if !slices.ContainsFunc(lent.Kueue.Quota.Events, func(e kueuereplay.Event) bool { return e.Key == "a2" && e.Kind == kueuereplay.Admitted && e.Borrowing }) {
		t.Errorf("a2's admission is not marked borrowing: %+v", lent.Kueue.Quota.Events)
	}
}

// TestRunBehindKueueReclaim is the harness's two-teams scenario: team-a
// borrows team-b's quota for a2; b1 arrives, Kueue evicts a2 to give the
// quota back, and b1 is placed at once in what a2 held. a2 is readmitted
// when a1 gives team-a's quota back and restarts then.
func TestRunBehindKueueReclaim(t *testing.T) {
	jobs := []Job{job("a1", 0, 36000, 2, 8), job("a2", 1, 36000, 2, 8), job("b1", 2, 36000, 2, 8)}
	front := KueueFront{Cohort: teams(16), FairSharing: true, Jobs: map[string]KueueJob{
		"a1": kueueJob("team-a", 16), "a2": kueueJob("team-a", 16), "b1": kueueJob("team-b", 16)}}
	res, err := Run(cluster(4, 8), jobs, Config{Params: scoring.DefaultParams(), Kueue: &front})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range res.Kueue.Quota.Events {
		if e.At.Sub(time.Time{}) < sec(36000) {
			order = append(order, string(e.Kind)+" "+e.Key)
		}
	}
	if want := []string{"admitted a1", "admitted a2", "evicted a2", "admitted b1"}; !slices.Equal(order, want) {
		t.Errorf("kueue's order %v, want %v", order, want)
	}
	if got, want := starts(res), []time.Duration{0, sec(36000), sec(2)}; !slices.Equal(got, want) {
		t.Errorf("starts %v, want %v: a1 at once, a2 restarted when a1 ends, b1 at its arrival", got, want)
	}
	if res.Kueue.Admitted["a2"] != sec(36000) || res.Kueue.Quota.QuotaWait["a2"] != sec(36000-2) {
		t.Errorf("a2 last admitted at %v after %v waiting for quota; want 10h, after 10h less 2s", res.Kueue.Admitted["a2"], res.Kueue.Quota.QuotaWait["a2"])
	}
}

// TestRunBehindKueueHoldsQuotaThroughCapacityWait: Kueue keeps a workload's
// quota reserved from admission until it finishes, its wait for nodes
// included. team-a's 16 GPUs of quota admit a1 and a2 at once on a cluster
// whose second node a job outside Kueue holds for 2h; a2 waits for a1's
// node and runs from 1h0m1s to 2h0m1s. The 16-GPU a3 then gets team-a's
// quota only when a2 ends: its wait is for quota, not for capacity. Held
// for its run from admission alone, a2 would have given its quota back at
// 1h0m2s and a3 would have been admitted to wait for nodes.
func TestRunBehindKueueHoldsQuotaThroughCapacityWait(t *testing.T) {
	jobs := []Job{job("free", 0, 7200, 1, 8), job("a1", 1, 3600, 1, 8), job("a2", 2, 3600, 1, 8), job("a3", 600, 3600, 2, 8)}
	front := KueueFront{Cohort: teams(0), Jobs: map[string]KueueJob{
		"a1": kueueJob("team-a", 8), "a2": kueueJob("team-a", 8), "a3": kueueJob("team-a", 16)}}
	res, err := Run(cluster(2, 8), jobs, Config{Params: scoring.DefaultParams(), Kueue: &front})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := starts(res), []time.Duration{0, sec(1), sec(3601), sec(7201)}; !slices.Equal(got, want) {
		t.Fatalf("starts %v, want %v", got, want)
	}
	if got := res.Kueue.Admitted["a3"]; got != sec(7201) {
		t.Errorf("a3 admitted at %v, want 2h0m1s, when a2 ends and gives team-a's quota back", got)
	}
	if got := res.Kueue.Quota.QuotaWait["a3"]; got != sec(7201-600) {
		t.Errorf("a3 waited %v for quota, want 1h50m1s", got)
	}
	// Pass 1 finds a2 and a3 holding quota past their runs; pass 2 admits
	// a3 when a2 ends, where it starts at once; pass 3 replays the same.
	if res.Kueue.Passes != 3 || !res.Kueue.Settled {
		t.Errorf("passes %d, settled %v; want 3, settled", res.Kueue.Passes, res.Kueue.Settled)
	}
}

// TestRunBehindKueueOnePassWithoutCapacityWait: while the cluster has room
// for whatever Kueue admits, each job holds its quota for its run and one
// pass is exact.
func TestRunBehindKueueOnePassWithoutCapacityWait(t *testing.T) {
	jobs := []Job{job("a1", 0, 3600, 2, 8), job("a2", 10, 3600, 2, 8)}
	front := KueueFront{Cohort: teams(0), Jobs: map[string]KueueJob{"a1": kueueJob("team-a", 16), "a2": kueueJob("team-a", 16)}}
	res, err := Run(cluster(4, 8), jobs, Config{Params: scoring.DefaultParams(), Kueue: &front})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kueue.Passes != 1 || !res.Kueue.Settled || res.Kueue.Admitted["a2"] != sec(3600) {
		t.Errorf("passes %d, settled %v, a2 admitted at %v; want one settled pass, a2 at 1h", res.Kueue.Passes, res.Kueue.Settled, res.Kueue.Admitted["a2"])
	}
}
