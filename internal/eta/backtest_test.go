package eta

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/sim"
)

// queueing is a FIFO queue of one-GPU jobs on one 8-GPU node, arriving
// faster than they leave, so waits grow past the backtest's ten minutes;
// noise scales each job's real run time against its prediction by a
// seeded log-normal draw (0: exact predictions).
func queueing(jobs int, noise float64) []sim.Job {
	rng := rand.New(rand.NewPCG(5, 6))
	out := make([]sim.Job, jobs)
	for i := range out {
		predicted := time.Duration(5+rng.IntN(10)) * time.Minute
		out[i] = sim.Job{Name: fmt.Sprintf("j%03d", i), Arrival: time.Duration(i) * time.Minute, Members: 1, Util: 1,
			Predicted: predicted, Duration: time.Duration(float64(predicted) * math.Exp(noise*rng.NormFloat64()))}
		out[i].Request.GPUs = 1
	}
	return out
}

// With exact predictions and nobody jumping the queue, every estimate is
// the actual start, and the interval (which the exact error measured from
// history makes a point) holds it.
func TestBacktestOfExactPredictionsIsExact(t *testing.T) {
	points, err := Backtest(context.Background(), cluster(1, 8), queueing(150, 0), binpack, BacktestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(points) < 50 {
		t.Fatalf("%d jobs waited over ten minutes, want at least 50: the workload does not queue", len(points))
	}
	for _, p := range points[len(points)/2:] {
		if p.AbsErrorPct() != 0 || !p.Covered() {
			t.Errorf("%s: estimated %v (%v..%v), started after %v", p.Job, p.P50, p.P10, p.P90, p.Actual)
		}
	}
}

// With run times that really scatter around their predictions, the
// intervals hold about as many actual starts as they claim.
func TestBacktestIntervalsHoldTheirShare(t *testing.T) {
	points, err := Backtest(context.Background(), cluster(1, 8), queueing(200, 0.8), binpack, BacktestOptions{Samples: 60, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := Summarise(points)
	if s.Points != 60 {
		t.Fatalf("%d points, want the 60 sampled", s.Points)
	}
	if s.IntervalCoverage < 0.6 || s.IntervalCoverage > 0.97 {
		t.Errorf("coverage %.2f, want near the 0.8 the p10..p90 interval claims", s.IntervalCoverage)
	}
	if s.MedianAbsErrorPct <= 0 || s.MedianAbsErrorPct > 50 {
		t.Errorf("median error %.1f%%: want some error, as run times scatter, but not a useless estimate", s.MedianAbsErrorPct)
	}
	t.Logf("coverage %.2f, median abs error %.1f%% over %d waits", s.IntervalCoverage, s.MedianAbsErrorPct, s.Points)
}

func TestSummarise(t *testing.T) {
	m := time.Minute
	s := Summarise([]Point{
		{Actual: 10 * m, P10: 5 * m, P50: 10 * m, P90: 20 * m, State: Starts},  // 0%, covered
		{Actual: 20 * m, P10: 1 * m, P50: 10 * m, P90: 15 * m, State: Starts},  // 50%, not covered
		{Actual: 10 * m, P10: 10 * m, P50: 12 * m, P90: 30 * m, State: Starts}, // 20%, covered
		{Actual: 10 * m, State: NotStarted},                                    // inf, not covered
	})
	if s.Points != 4 || s.MedianAbsErrorPct != 35 || s.IntervalCoverage != 0.5 {
		t.Errorf("summary %+v, want 4 points, median 35%%, coverage 0.5", s)
	}
	if z := Summarise(nil); z.Points != 0 || z.MedianAbsErrorPct != 0 {
		t.Errorf("empty summary %+v", z)
	}
}

// A backtest whose context is cancelled stops at once: it returns the
// context's error, with no figures, and asks about no further submission.
func TestBacktestStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done, total := 0, 0
	points, err := Backtest(ctx, cluster(1, 8), queueing(150, 0.8), binpack, BacktestOptions{Seed: 1,
		Progress: func(d, n int) { done, total = d, n; cancel() }})
	if !errors.Is(err, context.Canceled) || points != nil {
		t.Fatalf("cancelled backtest returned %d points and %v, want none and context.Canceled", len(points), err)
	}
	if done != 1 || total < 2 {
		t.Errorf("it asked about %d of %d submissions, want it stopped after the first of several", done, total)
	}
}
