package scoring

import (
	"testing"
	"time"
)

var h100 = FlavorResource{Flavor: "h100", Resource: "nvidia.com/gpu"}

func gpus(n int64) map[FlavorResource]int64 { return map[FlavorResource]int64{h100: n} }

func ptr(v int64) *int64 { return &v }

func twoTeams() (KueueCohort, *KueueClusterQueue, *KueueClusterQueue) {
	a := &KueueClusterQueue{Name: "team-a", Cohort: "research", Quotas: map[FlavorResource]KueueQuota{h100: {Nominal: 8}}}
	b := &KueueClusterQueue{Name: "team-b", Cohort: "research", Quotas: map[FlavorResource]KueueQuota{h100: {Nominal: 8}}}
	return KueueCohort{a, b}, a, b
}

func TestKueueAvailable(t *testing.T) {
	c, a, b := twoTeams()
	if got := c.Available(a, h100); got != 16 {
		t.Errorf("empty cohort: team-a may use %d, want 16 (its 8 and team-b's 8)", got)
	}
	a.Admit(gpus(12))
	if got := c.Available(b, h100); got != 4 {
		t.Errorf("team-a borrowing 4: team-b may use %d, want 4", got)
	}
	if c.Fits(b, gpus(8)) {
		t.Error("team-b's 8-GPU job fits while team-a borrows 4 of its GPUs; want it to wait for quota")
	}
	if !c.Borrows(a, gpus(1)) || c.Borrows(b, gpus(8)) {
		t.Error("Borrows: team-a past nominal must borrow, team-b within nominal must not")
	}

	// A borrowing limit caps what the cohort lends, counted from nominal.
	c, a, _ = twoTeams()
	a.Quotas[h100] = KueueQuota{Nominal: 8, BorrowingLimit: ptr(2)}
	a.Admit(gpus(8))
	if got := c.Available(a, h100); got != 2 {
		t.Errorf("borrowing limit 2 at nominal: team-a may use %d more, want 2", got)
	}

	// A lending limit keeps the rest of nominal for the lender alone.
	c, a, b = twoTeams()
	b.Quotas[h100] = KueueQuota{Nominal: 8, LendingLimit: ptr(4)}
	if got := c.Available(a, h100); got != 12 {
		t.Errorf("team-b lends 4: team-a may use %d, want 12", got)
	}
	a.Admit(gpus(12))
	if got := c.Available(b, h100); got != 4 {
		t.Errorf("team-a uses all team-b lends: team-b keeps %d, want its unlent 4", got)
	}

	alone := &KueueClusterQueue{Name: "solo", Quotas: map[FlavorResource]KueueQuota{h100: {Nominal: 4}}}
	alone.Admit(gpus(3))
	if got := (KueueCohort{alone}).Available(alone, h100); got != 1 {
		t.Errorf("ClusterQueue without cohort: %d available, want 1", got)
	}
}

func TestKueueOrder(t *testing.T) {
	c, a, b := twoTeams()
	a.Admit(gpus(8))
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	entries := []KueueEntry{
		{Key: "a-urgent", Queue: a, Req: gpus(2), Priority: 100, Created: t0},
		{Key: "b-late", Queue: b, Req: gpus(2), Priority: 0, Created: t0.Add(time.Minute)},
	}
	c.KueueOrder(entries, false)
	if entries[0].Key != "b-late" {
		t.Errorf("order %s, %s: a head within nominal goes before one that would borrow, whatever its priority", entries[0].Key, entries[1].Key)
	}

	// With fair sharing, of two borrowing heads the one whose queue would
	// hold the smaller share of the cohort goes first.
	c, a, b = twoTeams()
	c = append(c, &KueueClusterQueue{Name: "team-c", Cohort: "research", Quotas: map[FlavorResource]KueueQuota{h100: {Nominal: 8}}})
	a.Admit(gpus(12)) // borrows 4
	b.Admit(gpus(8))
	entries = []KueueEntry{
		{Key: "a-next", Queue: a, Req: gpus(2), Priority: 5, Created: t0},
		{Key: "b-next", Queue: b, Req: gpus(2), Priority: 0, Created: t0.Add(time.Minute)},
	}
	c.KueueOrder(entries, true)
	if entries[0].Key != "b-next" {
		t.Errorf("fair sharing order %s, %s: team-b would borrow 2 of 24 lendable, team-a 6; want team-b first", entries[0].Key, entries[1].Key)
	}
	if ab, bb := c.DominantShare(a, gpus(2)), c.DominantShare(b, gpus(2)); ab != 250 || bb != 1000.0*2/24 {
		t.Errorf("dominant shares a=%v b=%v, want 250 and %v", ab, bb, 1000.0*2/24)
	}
	c.KueueOrder(entries, false)
	if entries[0].Key != "a-next" {
		t.Errorf("without fair sharing, both borrowing: want the higher priority first, got %s", entries[0].Key)
	}
}

func TestKueueReclaim(t *testing.T) {
	c, a, b := twoTeams()
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	var running []KueueAdmitted
	for i, key := range []string{"a-1", "a-2", "a-3"} {
		a.Admit(gpus(4))
		running = append(running, KueueAdmitted{Key: key, Queue: a, Req: gpus(4), Admitted: t0.Add(time.Duration(i) * time.Minute)})
	}
	victims := c.Reclaim(b, gpus(8), running)
	if len(victims) != 1 || victims[0].Key != "a-3" {
		t.Fatalf("reclaim for team-b's 8 GPUs evicts %v, want the most recently admitted borrower a-3 only", victims)
	}
	if a.Usage[h100] != 12 {
		t.Errorf("Reclaim changed usage to %d; it must only choose", a.Usage[h100])
	}
	a.Release(victims[0].Req)
	if !c.Fits(b, gpus(8)) {
		t.Error("after the eviction team-b's job does not fit")
	}

	// A job that would take its own queue past nominal reclaims nothing:
	// reclaiming is for quota a queue is owed.
	c, a, b = twoTeams()
	a.Admit(gpus(8))
	b.Admit(gpus(4))
	held := []KueueAdmitted{{Key: "a-1", Queue: a, Req: gpus(8), Admitted: t0}}
	if v := c.Reclaim(b, gpus(6), held); v != nil {
		t.Errorf("reclaim for a job that would borrow: %v, want none", v)
	}
}
