package why

import (
	"testing"
	"time"

	"github.com/schedloop/schedloop"
)

// TestQuotaIntervals: a workload waits for quota from creation to its
// reservation, runs, is preempted, and waits again until now; the pods'
// own wait (gated from creation, then short of GPUs after admission) keeps
// only what quota does not explain.
func TestQuotaIntervals(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	short := "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 16 more needed"
	wl := schedloop.KueueWorkload{Name: "b1", ClusterQueue: "team-b", CreatedAt: at(0), Conditions: []schedloop.KueueCondition{
		{Type: "QuotaReserved", Status: "False", Reason: "WaitingForQuota", Message: short, At: at(1), Category: schedloop.WaitQuota},
		{Type: "QuotaReserved", Status: "True", Reason: "QuotaReserved", At: at(30)},
		{Type: "Admitted", Status: "True", Reason: "Admitted", At: at(30)},
		{Type: "Preempted", Status: "True", Reason: "InCohortReclamation", At: at(100), Category: schedloop.WaitPreemption},
		{Type: "QuotaReserved", Status: "False", Reason: "PendingEvaluation", At: at(100), Category: schedloop.WaitPreemption},
	}}
	got := QuotaIntervals(wl, nil, at(130))
	if len(got) != 2 {
		t.Fatalf("quota intervals = %+v, want two", got)
	}
	if !got[0].Start.Equal(at(0)) || !got[0].End.Equal(at(30)) || got[0].Seconds != 30 || got[0].Category != "quota" ||
		got[0].Label != "waiting for quota in ClusterQueue team-b (WaitingForQuota: "+short+")" {
		t.Errorf("first quota wait = %+v", got[0])
	}
	if !got[1].Start.Equal(at(100)) || !got[1].End.Equal(at(130)) || got[1].Label != "waiting for quota in ClusterQueue team-b" {
		t.Errorf("wait after preemption = %+v", got[1])
	}

	pod := []Interval{
		{Start: at(0), End: at(40), Category: "other"},
		{Start: at(90), End: at(120), Category: "insufficient_gpu"},
	}
	clipped := ClipToQuota(pod, got)
	want := []struct{ from, to int }{{30, 40}, {90, 100}}
	if len(clipped) != len(want) {
		t.Fatalf("clipped = %+v, want %d intervals", clipped, len(want))
	}
	for i, w := range want {
		if !clipped[i].Start.Equal(at(w.from)) || !clipped[i].End.Equal(at(w.to)) || clipped[i].Seconds != float64(w.to-w.from) {
			t.Errorf("clipped[%d] = %v..%v, want %ds..%ds", i, clipped[i].Start, clipped[i].End, w.from, w.to)
		}
	}

	done := wl
	done.Conditions = append(done.Conditions[:3:3], schedloop.KueueCondition{Type: "Finished", Status: "True", At: at(50)})
	if got := QuotaIntervals(done, nil, at(130)); len(got) != 1 {
		t.Errorf("finished workload: %d quota intervals, want 1", len(got))
	}

	// With the ClusterQueue's spec stored, the label says what it may
	// borrow of the flavour the workload was assigned.
	limit := int64(8000)
	cq := schedloop.KueueClusterQueue{Name: "team-b", Cohort: "research", Quotas: []schedloop.KueueQuota{
		{Flavor: "a100", Resource: "nvidia.com/gpu", Nominal: 4000},
		{Flavor: "h100", Resource: "nvidia.com/gpu", Nominal: 16000, BorrowingLimit: &limit},
	}}
	wl.Flavors = map[string]string{"nvidia.com/gpu": "h100"}
	if got := QuotaIntervals(wl, &cq, at(130)); len(got) != 2 ||
		got[1].Label != "waiting for quota in ClusterQueue team-b (borrowing from cohort research: nvidia.com/gpu on h100 nominal 16, up to 8 more)" {
		t.Errorf("quota intervals with the ClusterQueue's spec = %+v", got)
	}
}

func TestBorrowing(t *testing.T) {
	zero := int64(0)
	for _, c := range []struct {
		cq      schedloop.KueueClusterQueue
		flavors map[string]string
		want    string
	}{
		{schedloop.KueueClusterQueue{Name: "solo", Quotas: []schedloop.KueueQuota{{Flavor: "h100", Resource: "nvidia.com/gpu", Nominal: 8000}}},
			nil, "borrowing: none, no cohort"},
		{schedloop.KueueClusterQueue{Name: "a", Cohort: "c", Quotas: []schedloop.KueueQuota{
			{Flavor: "h100", Resource: "nvidia.com/gpu", Nominal: 8000},
			{Flavor: "cpu", Resource: "cpu", Nominal: 1500, BorrowingLimit: &zero}}},
			nil, "borrowing from cohort c: nvidia.com/gpu on h100 nominal 8, as much more as the cohort lends; cpu on cpu nominal 1.5, none more"},
		{schedloop.KueueClusterQueue{Name: "a", Cohort: "c", Quotas: []schedloop.KueueQuota{{Flavor: "h100", Resource: "nvidia.com/gpu", Nominal: 8000}}},
			map[string]string{"nvidia.com/gpu": "a100"}, "borrowing from cohort c"},
	} {
		if got := Borrowing(c.cq, c.flavors); got != c.want {
			t.Errorf("Borrowing(%+v, %v) = %q, want %q", c.cq, c.flavors, got, c.want)
		}
	}
}
