package kueuereplay

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/scoring"
)

var h100 = scoring.FlavorResource{Flavor: "h100", Resource: "nvidia.com/gpu"}

func gpus(n int64) map[scoring.FlavorResource]int64 { return map[scoring.FlavorResource]int64{h100: n} }

func teams() scoring.KueueCohort {
	return scoring.KueueCohort{
		{Name: "team-a", Cohort: "research", Quotas: map[scoring.FlavorResource]scoring.KueueQuota{h100: {Nominal: 8}}},
		{Name: "team-b", Cohort: "research", Quotas: map[scoring.FlavorResource]scoring.KueueQuota{h100: {Nominal: 8}}},
	}
}

func trace(evs []Event, t0 time.Time) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%s %s %s", e.At.Sub(t0), e.Kind, e.Key)
		if e.Borrowing {
			b.WriteString(" borrowing")
		}
		if e.By != "" {
			b.WriteString(" for " + e.By)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestReclaimWithinCohort: team-a borrows team-b's idle quota; team-b's
// gang arrives, Kueue evicts team-a's newest borrower and admits the gang;
// the evicted job gets quota back when team-a's first job finishes.
func TestReclaimWithinCohort(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	wls := []Workload{
		{Key: "a-1", Queue: "team-a", Req: gpus(4), Arrive: t0, Run: 30 * time.Minute},
		{Key: "a-2", Queue: "team-a", Req: gpus(4), Arrive: t0.Add(time.Second), Run: time.Hour},
		{Key: "a-3", Queue: "team-a", Req: gpus(4), Arrive: t0.Add(2 * time.Second), Run: time.Hour},
		{Key: "b-gang", Queue: "team-b", Req: gpus(8), Arrive: t0.Add(10 * time.Minute), Run: time.Hour},
	}
	res, err := Replay(teams(), wls, true)
	if err != nil {
		t.Fatal(err)
	}
	want := `0s admitted a-1
1s admitted a-2
2s admitted a-3 borrowing
10m0s evicted a-3 for b-gang
10m0s admitted b-gang
30m0s finished a-1
30m0s admitted a-3
1h0m1s finished a-2
1h10m0s finished b-gang
1h30m0s finished a-3
`
	if got := trace(res.Events, t0); got != want {
		t.Errorf("events:\n%s\nwant:\n%s", got, want)
	}
	if got := res.QuotaWait["a-3"]; got != 20*time.Minute {
		t.Errorf("a-3 waited %v for quota after its eviction, want 20m", got)
	}
	if got := res.QuotaWait["b-gang"]; got != 0 {
		t.Errorf("b-gang waited %v, want 0: reclaim gives it its nominal quota at once", got)
	}
}

// TestFairSharingOrder: with fair sharing, of two heads that would borrow,
// the one leaving its queue the smaller share of the cohort is admitted
// first; without it, priority, arrival and key decide.
func TestFairSharingOrder(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	cohort := func() scoring.KueueCohort {
		c := teams()
		c = append(c, &scoring.KueueClusterQueue{Name: "team-c", Cohort: "research", Quotas: map[scoring.FlavorResource]scoring.KueueQuota{h100: {Nominal: 8}}})
		return c
	}
	wls := []Workload{
		{Key: "a-1", Queue: "team-a", Req: gpus(12), Arrive: t0, Run: time.Hour},
		{Key: "b-1", Queue: "team-b", Req: gpus(10), Arrive: t0, Run: time.Hour},
		{Key: "a-2", Queue: "team-a", Req: gpus(1), Arrive: t0.Add(time.Minute), Run: time.Hour},
		{Key: "b-2", Queue: "team-b", Req: gpus(1), Arrive: t0.Add(2 * time.Minute), Run: time.Hour},
		{Key: "free", Queue: "team-c", Req: gpus(1), Arrive: t0.Add(3 * time.Minute), Run: time.Minute},
	}
	// At 0s a-1 would borrow 4 of the 24 lendable GPUs and b-1 2: with fair
	// sharing b-1 goes first although a-1 sorts first by key. At 3m team-c
	// reclaims its nominal quota from the newest borrower, b-2.
	res, err := Replay(cohort(), wls, true)
	if err != nil {
		t.Fatal(err)
	}
	want := `0s admitted b-1 borrowing
0s admitted a-1 borrowing
1m0s admitted a-2 borrowing
2m0s admitted b-2 borrowing
3m0s evicted b-2 for free
3m0s admitted free
4m0s finished free
4m0s admitted b-2 borrowing
1h0m0s finished a-1
1h0m0s finished b-1
1h1m0s finished a-2
1h4m0s finished b-2
`
	if got := trace(res.Events, t0); got != want {
		t.Errorf("fair sharing events:\n%s\nwant:\n%s", got, want)
	}
	res, err = Replay(cohort(), wls, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := trace(res.Events, t0); !strings.HasPrefix(got, "0s admitted a-1 borrowing\n0s admitted b-1 borrowing\n") {
		t.Errorf("without fair sharing, equal priority and arrival go by key; events:\n%s", got)
	}
	if got := res.QuotaWait["b-2"]; got != time.Minute {
		t.Errorf("b-2 waited %v for quota after its eviction, want 1m", got)
	}
}

func TestReplayRefusesBadInput(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		wls  []Workload
		want string
	}{
		{[]Workload{{Key: "x", Queue: "nope", Req: gpus(1), Arrive: t0, Run: time.Minute}}, `queue "nope"`},
		{[]Workload{{Key: "x", Queue: "team-a", Req: gpus(1), Arrive: t0}}, "run 0s"},
		{[]Workload{{Key: "x", Queue: "team-a", Req: gpus(1), Arrive: t0, Run: 1}, {Key: "x", Queue: "team-a", Req: gpus(1), Arrive: t0, Run: 1}}, "repeated"},
	} {
		if _, err := Replay(teams(), tt.wls, false); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Replay(%v) error %v, want one naming %q", tt.wls, err, tt.want)
		}
	}
}

// TestNeverFits: a workload larger than the cohort waits to the end and its
// wait is counted, without the replay looping.
func TestNeverFits(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	res, err := Replay(teams(), []Workload{
		{Key: "huge", Queue: "team-a", Req: gpus(64), Arrive: t0, Run: time.Minute},
		{Key: "small", Queue: "team-b", Req: gpus(1), Arrive: t0.Add(time.Hour), Run: time.Minute},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.QuotaWait["huge"]; got != time.Hour+time.Minute {
		t.Errorf("huge waited %v, want 1h1m (to the last event)", got)
	}
}

// TestEveryResourceIsCharged: a workload is admitted only when every
// flavour-resource it asks fits; here team-a's cpu quota, not its GPUs,
// holds the second job back until the first finishes.
func TestEveryResourceIsCharged(t *testing.T) {
	cpu := scoring.FlavorResource{Flavor: "default", Resource: "cpu"}
	mem := scoring.FlavorResource{Flavor: "default", Resource: "memory"}
	c := scoring.KueueCohort{{Name: "team-a", Quotas: map[scoring.FlavorResource]scoring.KueueQuota{
		h100: {Nominal: 16000}, cpu: {Nominal: 64000}, mem: {Nominal: 512 << 30 * 1000}}}}
	ask := map[scoring.FlavorResource]int64{h100: 4000, cpu: 40000, mem: 64 << 30 * 1000}
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	res, err := Replay(c, []Workload{
		{Key: "a-1", Queue: "team-a", Req: ask, Arrive: t0, Run: time.Hour},
		{Key: "a-2", Queue: "team-a", Req: ask, Arrive: t0.Add(time.Minute), Run: time.Hour},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "0s admitted a-1\n1h0m0s finished a-1\n1h0m0s admitted a-2\n2h0m0s finished a-2\n"
	if got := trace(res.Events, t0); got != want {
		t.Errorf("events:\n%s\nwant:\n%s", got, want)
	}
}

// TestFlavorFallThrough: two ClusterQueues whose GPUs come in two flavours,
// h100 tried before spot. team-d (WhenCanBorrow TryNextFlavor) passes over
// the h100 it could borrow for its own spot; team-c's second job finds
// h100 full and falls through to spot, borrowing team-d's; team-d's second
// job finds h100 full, reclaims its spot from team-c and team-c's job waits,
// no flavour left with room.
func TestFlavorFallThrough(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	const gpu = "nvidia.com/gpu"
	q := func(name string, h100, spot int64) *scoring.KueueClusterQueue {
		return &scoring.KueueClusterQueue{Name: name, Cohort: "lab", Quotas: map[scoring.FlavorResource]scoring.KueueQuota{
			{Flavor: "h100", Resource: gpu}: {Nominal: h100}, {Flavor: "spot", Resource: gpu}: {Nominal: spot}},
			Groups: []scoring.KueueResourceGroup{{Resources: []string{gpu}, Flavors: []string{"h100", "spot"}}}}
	}
	c, d := q("team-c", 8, 0), q("team-d", 0, 16)
	d.WhenCanBorrow = scoring.KueueTryNextFlavor
	ask := map[string]int64{gpu: 8}
	wls := []Workload{
		{Key: "d1", Queue: "team-d", Ask: ask, Arrive: t0, Run: time.Hour},
		{Key: "c1", Queue: "team-c", Ask: ask, Arrive: t0.Add(time.Second), Run: time.Hour},
		{Key: "c2", Queue: "team-c", Ask: ask, Arrive: t0.Add(2 * time.Second), Run: time.Hour},
		{Key: "d2", Queue: "team-d", Ask: ask, Arrive: t0.Add(3 * time.Second), Run: time.Hour},
	}
	res, err := Replay(scoring.KueueCohort{c, d}, wls, true)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range res.Events {
		fmt.Fprintf(&b, "%s %s %s", e.At.Sub(t0), e.Kind, e.Key)
		if e.Kind == Admitted {
			b.WriteString(" on " + e.Flavors[gpu])
		}
		if e.Borrowing {
			b.WriteString(" borrowing")
		}
		b.WriteString("\n")
	}
	want := `0s admitted d1 on spot
1s admitted c1 on h100
2s admitted c2 on spot borrowing
3s evicted c2
3s admitted d2 on spot
1h0m0s finished d1
1h0m0s admitted c2 on spot borrowing
1h0m1s finished c1
1h0m3s finished d2
2h0m0s finished c2
`
	if got := b.String(); got != want {
		t.Errorf("events:\n%s\nwant:\n%s", got, want)
	}
}

// TestCohortFungibility: a stored ClusterQueue's flavorFungibility reaches
// the replay. team-d may borrow team-c's h100, tried first; under Kueue's
// default (MayStopSearch) its job takes it, borrowing; stored with
// whenCanBorrow TryNextFlavor it goes on to its own spot.
func TestCohortFungibility(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	const gpu = "nvidia.com/gpu"
	for _, tc := range []struct {
		whenCanBorrow, want string
		borrowing           bool
	}{
		{"", "h100", true},
		{scoring.KueueTryNextFlavor, "spot", false},
	} {
		stored := []schedloop.KueueClusterQueue{
			{Name: "team-c", Cohort: "lab", Quotas: []schedloop.KueueQuota{
				{Flavor: "h100", Resource: gpu, Nominal: 8}, {Flavor: "spot", Resource: gpu}}},
			{Name: "team-d", Cohort: "lab", WhenCanBorrow: tc.whenCanBorrow, Quotas: []schedloop.KueueQuota{
				{Flavor: "h100", Resource: gpu}, {Flavor: "spot", Resource: gpu, Nominal: 16}}},
		}
		cohort := Cohort(stored)
		if got := cohort[1].WhenCanBorrow; got != tc.whenCanBorrow {
			t.Errorf("whenCanBorrow %q read as %q", tc.whenCanBorrow, got)
		}
		res, err := Replay(cohort, []Workload{{Key: "d1", Queue: "team-d", Ask: map[string]int64{gpu: 8}, Arrive: t0, Run: time.Hour}}, false)
		if err != nil {
			t.Fatal(err)
		}
		if e := res.Events[0]; e.Kind != Admitted || e.Flavors[gpu] != tc.want || e.Borrowing != tc.borrowing {
			t.Errorf("whenCanBorrow %q: first event %+v, want d1 admitted on %s, borrowing %v", tc.whenCanBorrow, e, tc.want, tc.borrowing)
		}
	}
}
