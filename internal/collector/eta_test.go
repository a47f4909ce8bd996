package collector

import (
	"context"
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
