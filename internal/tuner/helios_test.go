package tuner

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/eta"
	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
)

func TestReadHeliosVCs(t *testing.T) {
	tests := []struct {
		name, in string
		want     []HeliosVC
		err      string
	}{
		{"published", "vc,node num\n6214e9,64\n7f04ca,32\n", []HeliosVC{{"6214e9", 64}, {"7f04ca", 32}}, ""},
		{"wrong header", "vc,nodes\n6214e9,64\n", nil, "header"},
		{"zero nodes", "vc,node num\n6214e9,0\n", nil, "field node num"},
		{"not a number", "vc,node num\n6214e9,lots\n", nil, "field node num"},
		{"empty name", "vc,node num\n,4\n", nil, "field vc"},
		{"repeated", "vc,node num\na,4\na,4\n", nil, "repeated"},
		{"ragged", "vc,node num\na,4,5\n", nil, "philly_vc.csv"},
	}
	for _, tc := range tests {
		got, err := ReadHeliosVCs(strings.NewReader(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("%s: %v, %v", tc.name, got, err)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: row %d = %+v, want %+v", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}

func FuzzReadHeliosVCs(f *testing.F) {
	f.Add("vc,node num\n6214e9,64\n7f04ca,32\n")
	f.Add("vc,node num\n")
	f.Add("\"vc\",\"node num\"\nx,\"1\"\n")
	f.Fuzz(func(t *testing.T, in string) {
		vcs, err := ReadHeliosVCs(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, v := range vcs {
			if v.Name == "" || v.Nodes < 1 {
				t.Errorf("accepted %+v from %q", v, in)
			}
		}
	})
}

// heliosSlice is the Helios workload of the committed Philly slice (the
// first 300 jobs of the trace, 2017-10-07..09): VC 6214e9 on the given
// number of 8-GPU nodes, the training part ending 2017-10-09 12:00.
func heliosSlice(t *testing.T, nodes int) HeliosWorkload {
	t.Helper()
	f, err := os.Open("../trace/testdata/philly/pollux_philly_head300.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tj, epoch, err := trace.ReadPhillyJobsEpoch(f)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewHeliosWorkload(tj, epoch, []HeliosVC{{"6214e9", nodes}}, time.Date(2017, 10, 9, 12, 0, 0, 0, time.UTC), 1)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// The experiment's machinery on the committed Philly slice (the first 300
// jobs of the trace, 2017-10-07..09): the window keeps them, VCs outside
// the list are dropped, and on a VC made small enough to queue, the SJF
// oracle beats FIFO, and shortest predicted service with backfill does not
// queue more than FIFO.
func TestHeliosOnPhillySlice(t *testing.T) {
	w := heliosSlice(t, 4)
	if n := len(w.Jobs["6214e9"]); n != 284 || len(w.Jobs) != 1 {
		t.Fatalf("selected %d jobs of 6214e9 in %d VCs, want 284 in 1", n, len(w.Jobs))
	}
	ctx := context.Background()
	run := func(p HeliosPolicy) HeliosOutcome {
		out, err := RunHelios(ctx, w, p, 0, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if out.Jobs != 284 || out.Unfinished != 0 {
			t.Fatalf("%s: %d jobs, %d unfinished", p.Name, out.Jobs, out.Unfinished)
		}
		return out
	}
	fifo, sjf := run(HeliosFIFO()), run(HeliosSJF())
	tuned := run(SchedloopPolicy("tuned", HeliosSetting{Order: scoring.OrderShortestService}, predict.DefaultOptions()))
	t.Logf("avg queue: fifo %.0f s, sjf %.0f s, shortest predicted service %.0f s", fifo.AvgQueue, sjf.AvgQueue, tuned.AvgQueue)
	if fifo.AvgQueue <= 0 || !(sjf.AvgQueue < fifo.AvgQueue) {
		t.Errorf("the slice must queue under FIFO and SJF must queue less: fifo %.0f s, sjf %.0f s", fifo.AvgQueue, sjf.AvgQueue)
	}
	if tuned.AvgQueue > fifo.AvgQueue {
		t.Errorf("shortest predicted service with backfill queued %.0f s, FIFO %.0f s", tuned.AvgQueue, fifo.AvgQueue)
	}
}

// The search moves the queue policy with the weights: on a contended node
// where a stream of short evaluation jobs queues behind long training
// jobs, it switches to shortest predicted service (learnt from the jobs'
// names as the replay goes) and mean JCT falls.
func TestSearchChoosesTheOrder(t *testing.T) {
	c := &sim.Cluster{}
	c.Nodes = append(c.Nodes, scoring.NewNode("n0", "", 8, 0, 0))
	var jobs []sim.Job
	for i := 0; i < 120; i++ {
		j := sim.Job{Name: fmt.Sprintf("train-%d", i), Arrival: time.Duration(i) * 5 * time.Minute, Duration: 40 * time.Minute,
			Members: 1, Request: scoring.Request{GPUs: 8}, Util: 1}
		if i%2 == 1 {
			j.Name, j.Duration = fmt.Sprintf("eval-%d", i), 2*time.Minute
		}
		jobs = append(jobs, j)
	}
	e := NewEvaluator(Workload{Cluster: c, Jobs: jobs}, Replays{Count: 1}, sim.Config{})
	start := Candidate{scoring.DefaultParams()}
	best, ev, steps, err := Search(context.Background(), e, start, SearchOptions{Objective: Objective{MetricMeanJCT: 1},
		Bounds: DefaultBounds(), Rounds: 1, MinGain: 0.002})
	if err != nil {
		t.Fatal(err)
	}
	before, err := e.Evaluate(context.Background(), start)
	if err != nil {
		t.Fatal(err)
	}
	if best.EffectiveOrder() != scoring.OrderShortestService {
		t.Errorf("order %s after %+v, want shortest-service", best.EffectiveOrder(), steps)
	}
	if a, b := ev.Mean()[MetricMeanJCT], before.Mean()[MetricMeanJCT]; !(a < 0.8*b) {
		t.Errorf("mean JCT %.0f s, from %.0f s: want at least 20%% lower", a, b)
	}
}

// The wait estimates backtested on the committed Philly slice, on a VC
// small enough to queue: every sampled job waited past ten minutes and was
// asked about at its submission, and the estimate is informative.
func TestHeliosETAOnPhillySlice(t *testing.T) {
	w := heliosSlice(t, 4)
	points, err := HeliosETA(context.Background(), w, SchedloopPolicy("default", HeliosSetting{}, predict.DefaultOptions()), eta.BacktestOptions{Samples: 40, Seed: 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) < 20 {
		t.Fatalf("%d submissions asked about, want at least 20: the slice does not queue", len(points))
	}
	for _, p := range points {
		if p.Actual <= eta.DefaultMinWait {
			t.Errorf("%s waited %v, not past %v", p.Job, p.Actual, eta.DefaultMinWait)
		}
	}
	s := eta.Summarise(points)
	t.Logf("%d waits: median abs error %.1f%%, p10..p90 coverage %.2f", s.Points, s.MedianAbsErrorPct, s.IntervalCoverage)
}

// With run times known exactly, every estimate on the committed Philly
// slice made with history enough to measure the error (the slice's first
// days finish few jobs) is the replay's own start, with and without
// backfill: the
// snapshot a submission sees (running jobs where the replay placed them,
// the queue in its order, the profile's rules) is the state the replay
// went on from, so what error the estimates have is the predictor's.
func TestHeliosETAIsExactWithExactRunTimes(t *testing.T) {
	w := heliosSlice(t, 8)
	for _, noBackfill := range []bool{true, false} {
		p := HeliosPolicy{Name: "exact", Config: func() (sim.Config, error) {
			return sim.Config{Params: scoring.Params{Weights: ConsolidateWeights()}, NoBackfill: noBackfill}, nil
		}, Jobs: func(js []sim.Job) []sim.Job {
			out := slices.Clone(js)
			for i := range out {
				out[i].Predicted = out[i].Duration
			}
			return out
		}}
		points, err := HeliosETA(context.Background(), w, p, eta.BacktestOptions{MinWait: time.Second, Seed: 2}, 1)
		if err != nil {
			t.Fatal(err)
		}
		measured := 0
		for _, pt := range points {
			if pt.Finished < eta.MinErrorSamples {
				// Too little history: the default error is assumed.
				continue
			}
			measured++
			if pt.P50 != pt.Actual || !pt.Covered() {
				t.Errorf("no backfill %v: %s started after %v, estimated %v (%v..%v)", noBackfill, pt.Job, pt.Actual, pt.P50, pt.P10, pt.P90)
			}
		}
		if measured < 5 {
			t.Errorf("no backfill %v: %d of %d submissions had history enough to measure the error, want at least 5", noBackfill, measured, len(points))
		}
	}
}
