package eta

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
)

func cluster(nodes, gpus int) *sim.Cluster {
	c := &sim.Cluster{}
	for i := 0; i < nodes; i++ {
		c.Nodes = append(c.Nodes, scoring.NewNode(string(rune('a'+i)), "A100", gpus, 0, 0))
	}
	return c
}

var binpack = sim.Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}}

func runningJob(name string, gpus int, predicted, elapsed time.Duration, nodes ...string) Job {
	return Job{Job: sim.Job{Name: name, Members: len(nodes), Request: scoring.Request{GPUs: gpus}, Predicted: predicted, RunningOn: nodes, Util: 1}, Elapsed: elapsed}
}

func pendingJob(name string, members, gpus int, predicted, queued time.Duration) Job {
	return Job{Job: sim.Job{Name: name, Members: members, Request: scoring.Request{GPUs: gpus}, Predicted: predicted, Queued: queued, Util: 1}}
}

// exact is a predictor that is never wrong.
func exact(t *testing.T) ErrorModel {
	t.Helper()
	obs := make([]Observation, MinErrorSamples)
	for i := range obs {
		d := time.Duration(i+1) * time.Minute
		obs[i] = Observation{Predicted: d, Ran: d, Finished: true}
	}
	return NewErrorModel(obs)
}

func TestForecastWithAnExactPredictor(t *testing.T) {
	snap := Snapshot{Cluster: cluster(2, 8), Config: binpack, Jobs: []Job{
		runningJob("r-a", 8, 100*time.Second, 40*time.Second, "a"),
		runningJob("r-b", 8, 300*time.Second, 0, "b"),
		pendingJob("p-first", 1, 8, 50*time.Second, time.Minute),
		pendingJob("p-gang", 2, 8, 50*time.Second, 0),
	}}
	got, err := Forecast(context.Background(), snap, Options{Errors: exact(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []Estimate{
		{Job: "p-first", State: Starts, P10: 60 * time.Second, P50: 60 * time.Second, P90: 60 * time.Second, Nodes: []string{"a"}, WaitsFor: []string{"r-a"}},
		// The gang needs both nodes: b frees at 300 s, a when p-first ends.
		{Job: "p-gang", State: Starts, P10: 300 * time.Second, P50: 300 * time.Second, P90: 300 * time.Second, Nodes: []string{"a", "b"}, WaitsFor: []string{"r-b"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("forecast:\n got %+v\nwant %+v", got, want)
	}
}

func TestForecastSaysWhyAJobNeverFits(t *testing.T) {
	limited := binpack
	limited.Queues = map[string]scoring.QueueLimit{"team": {MaxGPUs: 4}}
	big := pendingJob("big", 1, 16, time.Minute, 0)
	over := pendingJob("over", 1, 8, time.Minute, 0)
	over.Queue = "team"
	got, err := Forecast(context.Background(), Snapshot{Cluster: cluster(2, 8), Config: limited, Jobs: []Job{big, over}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"needs 1 pods of 16 GPUs", "queue team may hold at most 4"} {
		if got[i].State != NeverFits || !strings.Contains(got[i].Reason, want) {
			t.Errorf("%s: %s %q, want %s with a reason containing %q", got[i].Job, got[i].State, got[i].Reason, NeverFits, want)
		}
	}
}

func TestForecastIsRepeatable(t *testing.T) {
	snap := Snapshot{Cluster: cluster(3, 8), Config: binpack}
	for i := 0; i < 3; i++ {
		snap.Jobs = append(snap.Jobs, runningJob("r"+string(rune('0'+i)), 8, time.Duration(i+1)*time.Hour, 10*time.Minute, string(rune('a'+i))))
	}
	for i := 0; i < 6; i++ {
		snap.Jobs = append(snap.Jobs, pendingJob("p"+string(rune('0'+i)), 1+i%2, 4*(1+i%2), time.Duration(i+1)*20*time.Minute, 0))
	}
	one, err := Forecast(context.Background(), snap, Options{Seed: 7, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	many, err := Forecast(context.Background(), snap, Options{Seed: 7, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(one, many) {
		t.Errorf("one worker and four disagree:\n%+v\n%+v", one, many)
	}
	for _, e := range one {
		if e.State != Starts || e.P10 > e.P50 || e.P50 > e.P90 {
			t.Errorf("%+v: want a start with P10 <= P50 <= P90", e)
		}
	}
}

// The interval means what it says: when run times really are the
// prediction times the modelled error, the actual start falls inside
// p10..p90 about 80% of the time.
func TestForecastIntervalIsCalibrated(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	errs := DefaultErrors()
	inside, trials := 0, 300
	for k := 0; k < trials; k++ {
		predicted := time.Duration(10+rng.IntN(100)) * time.Minute
		elapsed := time.Duration(rng.IntN(10)) * time.Minute
		// The truth: a whole run drawn from the error, given the job has
		// already run elapsed.
		var total time.Duration
		for total <= elapsed {
			total = time.Duration(float64(predicted) * math.Exp(rng.NormFloat64()))
		}
		actual := total - elapsed
		snap := Snapshot{Cluster: cluster(1, 8), Config: binpack, Jobs: []Job{
			runningJob("r", 8, predicted, elapsed, "a"),
			pendingJob("p", 1, 8, time.Hour, 0),
		}}
		got, err := Forecast(context.Background(), snap, Options{Seed: uint64(k), Errors: errs, Runs: 20})
		if err != nil {
			t.Fatal(err)
		}
		if e := got[0]; e.P10 <= actual+time.Second && actual <= e.P90+time.Second {
			inside++
		}
	}
	// Twenty draws' p10..p90 spans 16/20 of them: coverage near 0.8,
	// within binomial noise of 300 trials.
	if cov := float64(inside) / float64(trials); cov < 0.7 || cov > 0.9 {
		t.Errorf("coverage %.2f over %d trials, want 0.7..0.9", cov, trials)
	}
}

func TestForecastRefusesBadInput(t *testing.T) {
	ok := Snapshot{Cluster: cluster(1, 8), Config: binpack}
	for _, tc := range []struct {
		name string
		snap Snapshot
		opt  Options
		want string
	}{
		{"runs", ok, Options{Runs: -1}, "field runs: -1"},
		{"too many runs", ok, Options{Runs: MaxRuns + 1}, "field runs"},
		{"no nodes", Snapshot{Config: binpack}, Options{}, "field cluster"},
		{"negative wait", Snapshot{Cluster: cluster(1, 8), Config: binpack, Jobs: []Job{pendingJob("p", 1, 1, time.Minute, -time.Second)}}, Options{}, "job p: elapsed 0s, queued -1s"},
		{"node gone", Snapshot{Cluster: cluster(1, 8), Config: binpack, Jobs: []Job{runningJob("r", 1, time.Minute, 0, "zz")}}, Options{}, `node "zz"`},
		{"negative window", Snapshot{Cluster: cluster(1, 8), Config: binpack, Window: -time.Hour}, Options{}, "field window: -1h0m0s"},
		{"arrival before the window", Snapshot{Cluster: cluster(1, 8), Config: binpack, Window: time.Hour,
			Arrivals: []sim.Job{{Name: "old", Members: 1, Arrival: -2 * time.Hour}}}, Options{}, "arrival old: submitted at -2h0m0s, outside the window"},
		{"arrival after the snapshot", Snapshot{Cluster: cluster(1, 8), Config: binpack, Window: time.Hour,
			Arrivals: []sim.Job{{Name: "next", Members: 1, Arrival: time.Minute}}}, Options{}, "arrival next: submitted at 1m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Forecast(context.Background(), tc.snap, tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestErrorModelQuantileAndCDFInvert(t *testing.T) {
	m := DefaultErrors()
	for _, u := range []float64{0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99} {
		if got := m.CDF(m.Quantile(u)); math.Abs(got-u) > 1e-9 {
			t.Errorf("CDF(Quantile(%v)) = %v", u, got)
		}
	}
	if q := m.Quantile(0.5); math.Abs(q-1) > 1e-9 {
		t.Errorf("default median ratio %v, want 1", q)
	}
	if m.CDF(1e9) < 1-1e-9 || m.CDF(0) != 0 {
		t.Errorf("CDF outside the ratios: %v, %v", m.CDF(1e9), m.CDF(0))
	}
	few := NewErrorModel([]Observation{{Predicted: time.Minute, Ran: time.Hour, Finished: true}})
	if few.Len() != DefaultErrors().Len() {
		t.Errorf("one sample: %d ratios; want the default model", few.Len())
	}
}

// Jobs still running count: twenty jobs that ended at their prediction and
// twenty still running at twice theirs make half the ratios "beyond 2",
// not all of them 1.
func TestErrorModelCountsRunningJobs(t *testing.T) {
	var obs []Observation
	for i := 0; i < 20; i++ {
		obs = append(obs, Observation{Predicted: time.Hour, Ran: time.Hour, Finished: true},
			Observation{Predicted: time.Hour, Ran: 2 * time.Hour})
	}
	m := NewErrorModel(obs)
	if got := m.CDF(1); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("share at or below ratio 1: %v, want 0.5", got)
	}
	if got := m.CDF(2); got != 0.5 {
		t.Errorf("share at or below ratio 2: %v, want 0.5 (the running jobs are beyond)", got)
	}
	if q := m.Quantile(0.75); q <= 1 {
		t.Errorf("ratio at 0.75: %v, want past 1: a quarter of the jobs are still running", q)
	}
	for _, u := range []float64{0.6, 0.75, 0.9, 0.99} {
		if got := m.CDF(m.Quantile(u)); math.Abs(got-u) > 1e-9 {
			t.Errorf("tail: CDF(Quantile(%v)) = %v", u, got)
		}
	}
}

// A draw deep in the tail of a running job's rest (past every measured
// ratio, so the 1/ratio tail answers) stays a long, positive run time:
// converted unbounded it overflowed into a negative one, and the replay
// refused the snapshot.
func TestDrawsStayBounded(t *testing.T) {
	var obs []Observation
	for i := 0; i < 40; i++ {
		obs = append(obs, Observation{Predicted: time.Minute, Ran: time.Minute, Finished: true})
	}
	obs = append(obs, Observation{Predicted: time.Minute, Ran: 1000 * time.Hour})
	m := NewErrorModel(obs)
	j := runningJob("r", 1, time.Minute, 1000*time.Hour, "a")
	for _, u := range []float64{0, 0.5, 0.999999, 1 - 1e-15} {
		if d := sampleRunTime(&j, m, 1, u); d < time.Second || d > MaxRunTime {
			t.Errorf("draw at %v: %v, want within 1s..%v", u, d, MaxRunTime)
		}
	}
	p := pendingJob("p", 1, 1, time.Duration(math.MaxInt64/2), 0)
	if d := sampleRunTime(&p, m, 1e9, 0.999); d < time.Second || d > MaxRunTime {
		t.Errorf("pending draw: %v", d)
	}
}

// The quantiles are read at plotting positions p(n+1): of ten draws, p10
// lies a tenth of the way from the first to the second, p50 halfway
// between the fifth and sixth, p90 nine tenths of the way from the ninth
// to the tenth; next to a run that never started, a quantile is Never.
func TestQuantilePlottingPositions(t *testing.T) {
	draws := make([]time.Duration, 10)
	for i := range draws {
		draws[i] = time.Duration(i+1) * 10 * time.Second
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0.1, 11 * time.Second}, {0.5, 55 * time.Second}, {0.9, 99 * time.Second}, {0.01, 10 * time.Second}, {0.99, 100 * time.Second}} {
		if got := quantile(draws, tc.p); got != tc.want {
			t.Errorf("quantile %v of 10..100 s: %v, want %v", tc.p, got, tc.want)
		}
	}
	draws[9] = Never
	if got := quantile(draws, 0.9); got != Never {
		t.Errorf("p90 beside a run that never started: %v, want Never", got)
	}
	if got := quantile(draws, 0.5); got != 55*time.Second {
		t.Errorf("p50: %v", got)
	}
}

// hourly are a day's submissions of an 8-GPU job of priority 10 that runs
// 30 minutes, one an hour: the jobs a replay draws as arriving later.
func hourly() []sim.Job {
	out := make([]sim.Job, 24)
	for i := range out {
		out[i] = sim.Job{Name: fmt.Sprintf("hp-%02d", i), Arrival: -time.Duration(i) * time.Hour, Members: 1, Priority: 10,
			Request: scoring.Request{GPUs: 8}, Predicted: 30 * time.Minute, Util: 1}
	}
	return out
}

// Jobs submitted after the snapshot and ordered ahead of a waiting one
// delay it: the replays draw them from the recent submissions, over as
// long as the job waits (ten hours here, past the first horizon drawn).
func TestForecastDrawsLaterArrivalsThatOvertake(t *testing.T) {
	snap := Snapshot{Cluster: cluster(1, 8), Config: binpack, Jobs: []Job{
		runningJob("r", 8, 10*time.Hour, 0, "a"),
		pendingJob("low", 1, 8, time.Hour, 0),
	}}
	alone, err := Forecast(context.Background(), snap, Options{Errors: exact(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if e := alone[0]; e.P10 != 10*time.Hour || e.P90 != 10*time.Hour {
		t.Fatalf("with no later submissions: %v..%v, want the running job's end, 10h", e.P10, e.P90)
	}
	snap.Arrivals, snap.Window = hourly(), 24*time.Hour
	got, err := Forecast(context.Background(), snap, Options{Errors: exact(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	// About ten of them queue before r ends, five hours of work, and more
	// come at half the node's capacity while they run: about 20h.
	if e := got[0]; e.State != Starts || e.P10 <= 12*time.Hour || e.P50 <= 15*time.Hour || e.P50 >= 30*time.Hour {
		t.Errorf("with an 8-GPU high-priority job submitted every hour: %s %v..%v..%v, want p10 over 12h and p50 in 15h..30h", e.State, e.P10, e.P50, e.P90)
	}
	for _, e := range got {
		if strings.Contains(strings.Join(e.WaitsFor, ","), "~") {
			t.Errorf("%s waits for %v: a drawn submission is not a job anyone can look up", e.Job, e.WaitsFor)
		}
	}
}

// Asking about one job draws later submissions only as far as it waits,
// and its estimate is the one made for every job: a submission after its
// start cannot move it.
func TestForecastOfAskedJobIsUnchanged(t *testing.T) {
	hi := pendingJob("hi", 1, 8, time.Hour, 0)
	hi.Priority = 10
	snap := Snapshot{Cluster: cluster(1, 8), Config: binpack, Arrivals: hourly(), Window: 24 * time.Hour, Jobs: []Job{
		runningJob("r", 8, 2*time.Hour, 0, "a"),
		pendingJob("low", 1, 8, time.Hour, 0),
		hi,
	}}
	all, err := Forecast(context.Background(), snap, Options{Errors: exact(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if all[0].P50 <= 2*all[1].P90 {
		t.Fatalf("low waits %v, hi %v: the test needs the other job to wait far longer than the one asked", all[0].P50, all[1].P50)
	}
	asked, err := Forecast(context.Background(), snap, Options{Errors: exact(t), Seed: 1, Asked: []int{2}})
	if err != nil {
		t.Fatal(err)
	}
	if asked[1].P10 != all[1].P10 || asked[1].P50 != all[1].P50 || asked[1].P90 != all[1].P90 {
		t.Errorf("asked alone: %v..%v..%v, with every job: %v..%v..%v", asked[1].P10, asked[1].P50, asked[1].P90, all[1].P10, all[1].P50, all[1].P90)
	}
	if _, err := Forecast(context.Background(), snap, Options{Errors: exact(t), Asked: []int{0}}); err == nil || !strings.Contains(err.Error(), "field asked") {
		t.Errorf("asking about a running job: %v, want an error naming the field", err)
	}
}

// Later submissions that alone fill the cluster starve a waiting job of
// lower priority for as long as they come: the replays draw them only up
// to the bound (a window past the snapshot's own work at the whole
// capacity, as the backlog never drains) and the estimate says its start
// is censored there, where a horizon doubled to 64 windows replayed weeks.
func TestForecastCensorsAStarvedJobAtTheBound(t *testing.T) {
	arrivals := hourly()
	for i := range arrivals {
		arrivals[i].Predicted = 2 * time.Hour // twice the node's capacity
	}
	snap := Snapshot{Cluster: cluster(1, 8), Config: binpack, Arrivals: arrivals, Window: 24 * time.Hour, Jobs: []Job{
		runningJob("r", 8, 10*time.Hour, 0, "a"),
		pendingJob("low", 1, 8, time.Hour, 0),
	}}
	got, err := Forecast(context.Background(), snap, Options{Errors: exact(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	// 8 GPUs for 10h and 8 for 1h over 8 GPUs, plus the window.
	e := got[0]
	if want := 24*time.Hour + 11*time.Hour; e.Horizon != want {
		t.Errorf("horizon %v, want %v", e.Horizon, want)
	}
	if e.State != Starts || !e.Censored() || e.P10 < e.Horizon {
		t.Errorf("starved job: %s %v..%v..%v, horizon %v; want every start past the horizon, censored", e.State, e.P10, e.P50, e.P90, e.Horizon)
	}
	snap.Arrivals = hourly() // half the capacity: the backlog drains
	got, err = Forecast(context.Background(), snap, Options{Errors: exact(t), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The same 88 GPU-hours over the 4 GPUs the submissions leave spare.
	if e := got[0]; e.Horizon != 24*time.Hour+22*time.Hour || e.Censored() {
		t.Errorf("job delayed by submissions that leave half the node: %v..%v..%v, horizon %v; want horizon 46h, not censored", e.P10, e.P50, e.P90, e.Horizon)
	}
}
