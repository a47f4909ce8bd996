package store_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// Estimates are scored against the starts that followed: only estimates of
// jobs that started later than the minimum wait count.
func TestETAAccuracy(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	m := time.Minute
	jobs := []schedloop.Job{
		// Started 40 minutes after the estimate: p50 30m (25% off), inside 20m..60m.
		{UID: "a", Namespace: "ml", Name: "a", Kind: schedloop.JobKindPod, MinMember: 1, Created: t0, Admitted: t0.Add(40 * m), Phase: schedloop.PhaseRunning},
		// Started 20 minutes after: p50 30m (50% off), outside 25m..60m.
		{UID: "b", Namespace: "ml", Name: "b", Kind: schedloop.JobKindPod, MinMember: 1, Created: t0, Admitted: t0.Add(20 * m), Phase: schedloop.PhaseRunning},
		// Started at once: not scored.
		{UID: "c", Namespace: "ml", Name: "c", Kind: schedloop.JobKindPod, MinMember: 1, Created: t0, Admitted: t0.Add(m), Phase: schedloop.PhaseRunning},
		// Still waiting: not scored.
		{UID: "d", Namespace: "ml", Name: "d", Kind: schedloop.JobKindPod, MinMember: 1, Created: t0, Phase: schedloop.PhasePending},
	}
	if err := st.UpsertJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	est := []store.ETAEstimate{
		{JobUID: "a", MadeAt: t0, State: "starts", P10: t0.Add(20 * m), P50: t0.Add(30 * m), P90: t0.Add(60 * m)},
		{JobUID: "b", MadeAt: t0, State: "starts", P10: t0.Add(25 * m), P50: t0.Add(30 * m), P90: t0.Add(60 * m)},
		{JobUID: "c", MadeAt: t0, State: "starts", P10: t0, P50: t0, P90: t0.Add(m)},
		{JobUID: "d", MadeAt: t0, State: "starts", P10: t0, P50: t0.Add(m), P90: t0.Add(2 * m)},
	}
	if err := st.InsertETAEstimates(ctx, est, t0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	a, err := st.ETAAccuracy(ctx, t0.Add(-time.Hour), t0.Add(time.Hour), 10*m)
	if err != nil {
		t.Fatal(err)
	}
	if a.Estimates != 2 || math.Abs(a.MedianAbsErrorPct-37.5) > 1e-9 || a.IntervalCoverage != 0.5 {
		t.Errorf("score %+v, want 2 estimates, median error 37.5%%, coverage 0.5", a)
	}
	// A later pass drops what is past retention.
	if err := st.InsertETAEstimates(ctx, nil, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if a, err := st.ETAAccuracy(ctx, t0.Add(-time.Hour), t0.Add(time.Hour), 10*m); err != nil || a.Estimates != 0 {
		t.Errorf("after retention: %+v, %v; want nothing left", a, err)
	}
}
