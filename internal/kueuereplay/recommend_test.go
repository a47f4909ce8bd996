package kueuereplay

import (
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
)

// TestRecommendMovesIdleQuota: team-b may not borrow and its three 4-GPU jobs
// run one after another on its 4 GPUs while 6 of team-a's 8 sit unused.
// The recommendation moves nominal quota from team-a to team-b, shows the
// waits it removes in the replay, and leaves the cohort it was given alone.
func TestRecommendMovesIdleQuota(t *testing.T) {
	zero := int64(0)
	c := scoring.KueueCohort{
		{Name: "team-a", Cohort: "research", Quotas: map[scoring.FlavorResource]scoring.KueueQuota{h100: {Nominal: 8}}},
		{Name: "team-b", Cohort: "research", Quotas: map[scoring.FlavorResource]scoring.KueueQuota{h100: {Nominal: 4, BorrowingLimit: &zero}}},
	}
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	wls := []Workload{
		{Key: "a-1", Queue: "team-a", Req: gpus(2), Arrive: t0, Run: 3 * time.Hour},
		{Key: "b-1", Queue: "team-b", Req: gpus(4), Arrive: t0, Run: time.Hour},
		{Key: "b-2", Queue: "team-b", Req: gpus(4), Arrive: t0, Run: time.Hour},
		{Key: "b-3", Queue: "team-b", Req: gpus(4), Arrive: t0, Run: time.Hour},
	}
	rec, err := Recommend(c, wls, RecommendOptions{Step: 4})
	if err != nil {
		t.Fatal(err)
	}
	if rec.WaitBefore != 3*time.Hour {
		t.Errorf("wait before = %v, want 3h (b-2 1h, b-3 2h)", rec.WaitBefore)
	}
	// With 8 GPUs team-b runs two at once and b-3 waits 1h. Moving the
	// next 4 would run all three at once but make a-1 wait the same hour,
	// so the search stops at one move.
	if rec.WaitAfter != time.Hour || rec.QueueWaitAfter["team-b"] != time.Hour {
		t.Errorf("wait after = %v (team-b %v), want 1h, all of it team-b's", rec.WaitAfter, rec.QueueWaitAfter["team-b"])
	}
	want := []QuotaChange{{Queue: "team-a", FR: h100, From: 8, To: 4}, {Queue: "team-b", FR: h100, From: 4, To: 8}}
	if len(rec.Changes) != len(want) || rec.Changes[0] != want[0] || rec.Changes[1] != want[1] {
		t.Errorf("changes = %+v, want %+v", rec.Changes, want)
	}
	for _, s := range []string{"kubectl patch clusterqueue team-b", "nominalQuota: 8", "borrowingLimit: 0", "kubectl patch clusterqueue team-a", "nominalQuota: 4", "- coveredResources:\n    - nvidia.com/gpu"} {
		if !strings.Contains(rec.Patch, s) {
			t.Errorf("patch lacks %q:\n%s", s, rec.Patch)
		}
	}
	if c[0].Quotas[h100].Nominal != 8 || c[1].Quotas[h100].Nominal != 4 || len(c[1].Usage) != 0 {
		t.Errorf("Recommend changed the cohort it was given: %+v %+v", c[0], c[1])
	}
}

// TestRecommendNothingToGain: with no quota wait there is nothing to move
// and no patch.
func TestRecommendNothingToGain(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	rec, err := Recommend(teams(), []Workload{{Key: "a-1", Queue: "team-a", Req: gpus(4), Arrive: t0, Run: time.Hour}}, RecommendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Changes) != 0 || rec.Patch != "" || rec.WaitBefore != 0 {
		t.Errorf("recommendation %+v, want none", rec)
	}
}

// TestRecommendStepsPerResource: cpu and GPU quotas are counted in units of
// their own, so each moves by its own step; team-b waits on cpu, and the
// move is 32 cores of it, not the GPU step.
func TestRecommendStepsPerResource(t *testing.T) {
	zero := int64(0)
	cpu := scoring.FlavorResource{Flavor: "default", Resource: "cpu"}
	q := func(name string) *scoring.KueueClusterQueue {
		return &scoring.KueueClusterQueue{Name: name, Cohort: "research", Quotas: map[scoring.FlavorResource]scoring.KueueQuota{
			h100: {Nominal: 8000, BorrowingLimit: &zero}, cpu: {Nominal: 64000, BorrowingLimit: &zero}}}
	}
	c := scoring.KueueCohort{q("team-a"), q("team-b")}
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	ask := map[scoring.FlavorResource]int64{h100: 1000, cpu: 32000}
	var wls []Workload
	for i, key := range []string{"b-1", "b-2", "b-3"} {
		wls = append(wls, Workload{Key: key, Queue: "team-b", Req: ask, Arrive: t0.Add(time.Duration(i) * time.Second), Run: time.Hour})
	}
	rec, err := Recommend(c, wls, RecommendOptions{Steps: map[string]int64{h100.Resource: 1000, cpu.Resource: 32000}})
	if err != nil {
		t.Fatal(err)
	}
	want := []QuotaChange{{Queue: "team-a", FR: cpu, From: 64000, To: 32000}, {Queue: "team-b", FR: cpu, From: 64000, To: 96000}}
	if len(rec.Changes) != len(want) || rec.Changes[0] != want[0] || rec.Changes[1] != want[1] {
		t.Errorf("changes = %+v, want %+v", rec.Changes, want)
	}
}
