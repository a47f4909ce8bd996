package collector

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/etaserve"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// One pass estimates the waiting job, stores the estimate and counts it in
// its wait bucket: with no history the running job is predicted an hour,
// of which 20 minutes have passed.
func TestEstimatorStoresAndCounts(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	start := now.Add(-20 * time.Minute)
	if err := st.UpsertNodes(ctx, []schedloop.Node{{Name: "n1", GPUModel: "H100", GPUCount: 8, Ready: true, FirstSeen: start, LastSeen: now}}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertJobs(ctx, []schedloop.Job{
		{UID: "run", Namespace: "ml", Name: "run", Kind: schedloop.JobKindPod, MinMember: 1, GPUsPerMember: 8, Created: start, Admitted: start, Started: start, FirstScheduled: start, Phase: schedloop.PhaseRunning},
		{UID: "wait", Namespace: "ml", Name: "wait", Kind: schedloop.JobKindPod, MinMember: 1, GPUsPerMember: 8, Created: now, Phase: schedloop.PhasePending},
		{UID: "huge", Namespace: "ml", Name: "huge", Kind: schedloop.JobKindPod, MinMember: 1, GPUsPerMember: 16, Created: now, Phase: schedloop.PhasePending},
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertPods(ctx, []schedloop.Pod{{UID: "p", Namespace: "ml", Name: "run", JobUID: "run", GPUs: 8, Node: "n1", Created: start, Scheduled: start, Started: start, Phase: schedloop.PhaseRunning}}); err != nil {
		t.Fatal(err)
	}
	e := &Estimator{Service: &etaserve.Service{Store: st, Now: func() time.Time { return now }, Seed: 1}, Store: st, Gauge: NewPendingByWaitGauge()}
	if err := e.Once(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := e.Service.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var wait time.Duration
	for _, j := range a.Jobs {
		if j.UID == "wait" {
			wait = time.Duration(*j.WaitP50Secs * float64(time.Second))
		}
	}
	if wait <= 0 {
		t.Fatalf("estimates %+v: want the waiting job to wait", a.Jobs)
	}
	bucket := ""
	for _, b := range WaitBuckets {
		if wait <= b.Upper {
			bucket = b.Label
			break
		}
	}
	if got := testutil.ToFloat64(e.Gauge.WithLabelValues(bucket)); got != 1 {
		t.Errorf("pending jobs expected to wait %v: gauge %s = %v, want 1", wait, bucket, got)
	}
	if got := testutil.ToFloat64(e.Gauge.WithLabelValues("never")); got != 1 {
		t.Errorf("never-fitting jobs: gauge = %v, want 1", got)
	}
	// The stored estimate scores once the job starts 40 minutes later.
	started := now.Add(40 * time.Minute)
	if err := st.UpsertJobs(ctx, []schedloop.Job{{UID: "wait", Namespace: "ml", Name: "wait", Kind: schedloop.JobKindPod, MinMember: 1, GPUsPerMember: 8, Created: now, Admitted: started, FirstScheduled: started, Phase: schedloop.PhaseRunning}}); err != nil {
		t.Fatal(err)
	}
	score, err := st.ETAAccuracy(ctx, now.Add(-time.Minute), now.Add(time.Minute), 10*time.Minute)
	if err != nil || score.Estimates != 1 {
		t.Errorf("score %+v, %v: want the one stored estimate scored", score, err)
	}
}

// Between its scheduled passes (a day apart here) the estimator estimates
// again after a change it is told of, once for a burst of them, and after
// a profile is applied, which it looks for itself.
func TestEstimatorRecomputesOnChange(t *testing.T) {
	st := storetest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	if err := st.UpsertNodes(ctx, []schedloop.Node{{Name: "n1", GPUModel: "H100", GPUCount: 8, Ready: true, FirstSeen: now, LastSeen: now}}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertJobs(ctx, []schedloop.Job{{UID: "wait", Namespace: "ml", Name: "wait", Kind: schedloop.JobKindPod, MinMember: 1, GPUsPerMember: 16, Created: now, Phase: schedloop.PhasePending}}); err != nil {
		t.Fatal(err)
	}
	var ticks atomic.Int64
	clock := func() time.Time { return now.Add(time.Duration(ticks.Add(1)) * time.Second) }
	e := &Estimator{Service: &etaserve.Service{Store: st, Now: clock, Seed: 1}, Store: st, Every: 24 * time.Hour, Debounce: 20 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	estimates := func() int {
		var n int
		if err := st.Pool().QueryRow(context.Background(), `SELECT count(DISTINCT made_at) FROM eta_estimates`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor := func(what string, want int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); estimates() < want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d estimates stored, want %d", what, estimates(), want)
			}
		}
	}
	waitFor("at start", 1)
	for range 3 {
		e.Changed()
	}
	waitFor("after a change", 2)
	id, err := st.InsertProfile(ctx, schedloop.Profile{Name: "sjf", Weights: map[string]float64{"bestfit": 1}, Order: "shortest-service"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ApplyProfile(ctx, id, now); err != nil {
		t.Fatal(err)
	}
	waitFor("after a profile was applied", 3)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A burst of changes is one estimate, not one each.
	if n := estimates(); n != 3 {
		t.Errorf("%d estimates stored; want 3: the start, one for the burst of changes, one for the profile", n)
	}
}
