package tuner

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
)

func phillySlice(t testing.TB) Workload {
	t.Helper()
	tj, err := trace.LoadJobs("../trace/testdata/philly/pollux_philly_head300.csv", trace.FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := trace.LoadInventory("../trace/testdata/philly/cluster_machine_list_head40.csv", trace.FormatAuto, nil, []int{1, 2, 4})
	if err != nil {
		t.Fatal(err)
	}
	return Workload{Cluster: sim.NewCluster(inv), Jobs: sim.JobsFromTrace(tj)}
}

func TestObjective(t *testing.T) {
	o, err := ParseObjective("gpu_idle_share=1, mean_jct_s=1")
	if err != nil {
		t.Fatal(err)
	}
	if o.String() != "gpu_idle_share=1,mean_jct_s=1" {
		t.Errorf("String() = %q", o.String())
	}
	ref := Values{MetricGPUIdle: 0.2, MetricMeanJCT: 100}
	if c := o.Cost(ref, ref); math.Abs(c-1) > 1e-12 {
		t.Errorf("a reference costs %v, want 1", c)
	}
	// Idle 10% better, JCT unchanged: half the weight gains 10%.
	if g := o.Gain(Values{MetricGPUIdle: 0.18, MetricMeanJCT: 100}, ref); math.Abs(g-0.05) > 1e-12 {
		t.Errorf("gain = %v, want 0.05", g)
	}
	for _, bad := range []string{"", "speed=1", "mean_jct_s", "mean_jct_s=-1", "mean_jct_s=0"} {
		if _, err := ParseObjective(bad); err == nil {
			t.Errorf("ParseObjective(%q) accepted", bad)
		}
	}
}

func TestBoundsClamp(t *testing.T) {
	b := DefaultBounds()
	from := Candidate{scoring.Params{Weights: scoring.Weights{scoring.TermTopology: 10, scoring.TermBinPack: 90},
		Queues: map[string]scoring.QueueLimit{"a": {MaxGPUs: 100}}, GangTimeout: time.Minute}}
	to := Candidate{scoring.Params{Weights: scoring.Weights{scoring.TermTopology: 50, scoring.TermBinPack: 100, scoring.TermSpread: 3},
		Queues: map[string]scoring.QueueLimit{"a": {MaxGPUs: 10}}, GangTimeout: time.Hour}}
	got := b.Clamp(from, to)
	want := Candidate{scoring.Params{Weights: scoring.Weights{scoring.TermTopology: 30, scoring.TermBinPack: 100, scoring.TermSpread: 3},
		Queues: map[string]scoring.QueueLimit{"a": {MaxGPUs: 50}}, GangTimeout: time.Minute}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Clamp = %+v\nwant %+v", got, want)
	}
	if d := FromDocument(want.Document("x")); !reflect.DeepEqual(d, want) {
		t.Errorf("document round trip: %+v", d)
	}
}

func TestDecide(t *testing.T) {
	g := DefaultGuardrails()
	tests := []struct {
		c       Comparison
		changed bool
		publish bool
		reason  string
	}{
		{Comparison{Gain: 0.1, Lower: 0.05, Gains: []float64{.1}, Wins: 1}, false, false, "nothing better"},
		{Comparison{Gain: 0.01, Lower: 0.005}, true, false, "below the 2.0% margin"},
		{Comparison{Gain: 0.05, Lower: -0.01, Gains: []float64{.2, -.1}, Wins: 1}, true, false, "not better with 95% confidence"},
		{Comparison{Gain: 0.05, Lower: 0.03, Gains: []float64{.05, .05}, Wins: 2}, true, true, "beats the 2.0% margin"},
	}
	for _, tc := range tests {
		d := g.Decide(tc.c, tc.changed)
		if d.Publish != tc.publish || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("Decide(%+v) = %+v, want %v %q", tc.c, d, tc.publish, tc.reason)
		}
	}
	o := DefaultObjective()
	before := Values{MetricGPUIdle: 0.2, MetricMeanJCT: 100, MetricP95JCT: 300, MetricHighPriorityWait: 10, MetricFragmentation: 3}
	worse := Values{MetricGPUIdle: 0.3, MetricMeanJCT: 150, MetricP95JCT: 300, MetricHighPriorityWait: 10, MetricFragmentation: 3}
	if v := g.Check(o, worse, before); !v.Rollback || !strings.Contains(v.Reason, "regressed") {
		t.Errorf("a 30%% worse outcome: %+v", v)
	}
	if v := g.Check(o, before, before); v.Rollback {
		t.Errorf("an unchanged outcome rolled back: %+v", v)
	}
	if v := g.Check(o, worse, Values{}); v.Rollback || v.Regression != 0 || !strings.Contains(v.Reason, "no baseline") {
		t.Errorf("no baseline: %+v", v)
	}
	if err := (Guardrails{Margin: 2}).Validate(); err == nil {
		t.Error("a 200% margin accepted")
	}
}

func TestSplitByTime(t *testing.T) {
	var jobs []sim.Job
	for i := 9; i >= 0; i-- {
		jobs = append(jobs, sim.Job{Name: string(rune('a' + i)), Arrival: time.Duration(i) * time.Hour})
	}
	train, held, cut := SplitByTime(jobs, 0.7)
	if len(train) != 7 || len(held) != 3 || cut != 7*time.Hour || held[0].Arrival != 0 {
		t.Errorf("split: %d train, %d held, cut %v, first held at %v", len(train), len(held), cut, held[0].Arrival)
	}
}

func TestHeldOutJobsInheritTheTrainingBacklog(t *testing.T) {
	c := &sim.Cluster{Depth: 1, Nodes: []*scoring.Node{scoring.NewNode("a", "A100", 8, 64000, 1<<20, "rack-0")}}
	one := func(name string, at, dur time.Duration) sim.Job {
		return sim.Job{Name: name, Arrival: at, Duration: dur, Members: 1, Request: scoring.Request{GPUs: 8}, Util: 1}
	}
	// Seven training jobs each take the node for an hour, arriving a
	// minute apart; the held-out three arrive right after them and find
	// a queue of six hours.
	var jobs []sim.Job
	for i := range 10 {
		jobs = append(jobs, one(fmt.Sprintf("j%d", i), time.Duration(i)*time.Minute, time.Hour))
	}
	_, held, cut := SplitByTime(jobs, 0.7)
	warm := HeldOutAfterTraining(jobs, cut)
	if len(warm) != 10 || !warm[6].Warmup || warm[7].Warmup || warm[7].Arrival != 7*time.Minute {
		t.Fatalf("held-out replay jobs: %+v", warm)
	}
	cand := FromDocument(profile.Default())
	ev, err := NewEvaluator(Workload{Cluster: c, Jobs: warm}, Replays{Count: 1}, sim.Config{}).Evaluate(context.Background(), cand)
	if err != nil {
		t.Fatal(err)
	}
	// j7 starts at 7h, j8 at 8h, j9 at 9h: JCTs of 7h-7m+1h and so on.
	want := (time.Duration(8*3600+9*3600+10*3600)*time.Second - (7+8+9)*time.Minute).Seconds() / 3
	if got := ev.PerReplay[0][MetricMeanJCT]; math.Abs(got-want) > 1e-9 {
		t.Errorf("held-out mean JCT %v s, want %v s: the held-out jobs must queue behind the training jobs", got, want)
	}
	alone, err := NewEvaluator(Workload{Cluster: c, Jobs: held}, Replays{Count: 1}, sim.Config{}).Evaluate(context.Background(), cand)
	if err != nil {
		t.Fatal(err)
	}
	if got := alone.PerReplay[0][MetricMeanJCT]; got >= want/2 {
		t.Errorf("alone the held-out jobs should not see the backlog: %v s", got)
	}
}

func TestTuneOnPhillySlice(t *testing.T) {
	w := phillySlice(t)
	cur := profile.Default()
	in := Input{Workload: w, Current: cur, Name: "tuned-test", Objective: DefaultObjective(), Guard: DefaultGuardrails(),
		Replays: Replays{Count: 3, Jitter: 10 * time.Minute, Seed: 1}, HoldoutFraction: 0.3, Rounds: 1, MinGain: 0.001,
		Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }}
	calls := 0
	in.Progress = func(done, total int, _ float64) {
		calls++
		if done > total {
			t.Errorf("progress %d of %d", done, total)
		}
	}
	r, err := Tune(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if r.TrainJobs+r.HeldJobs != len(w.Jobs) || r.Inputs.Replays != 3 || len(r.HeldOut.Gains) != 3 || calls == 0 {
		t.Errorf("report: %d+%d jobs, %d replays, %d progress calls", r.TrainJobs, r.HeldJobs, r.Inputs.Replays, calls)
	}
	if err := r.Proposed.Validate(); err != nil {
		t.Errorf("proposal does not validate: %v", err)
	}
	want := in.Guard.Decide(r.HeldOut, len(r.Changes) > 0)
	if r.Decision != want {
		t.Errorf("decision %+v, want %+v", r.Decision, want)
	}
	again, err := Tune(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, again) {
		t.Error("two runs on the same input disagree")
	}
	ev, err := r.Evidence()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReportFromEvidence(ev)
	if err != nil {
		t.Fatal(err)
	}
	var a, b strings.Builder
	if err := r.Explain(&a); err != nil {
		t.Fatal(err)
	}
	back.Explain(&b)
	if a.String() != b.String() {
		t.Errorf("explain differs after the evidence round trip:\n%s\n---\n%s", a.String(), b.String())
	}
	if r.Prediction.Jobs == 0 || r.Prediction.Jobs > r.HeldJobs || r.Prediction.Within2x <= 0 {
		t.Errorf("prediction accuracy on the held-out jobs: %+v of %d", r.Prediction, r.HeldJobs)
	}
	for _, s := range []string{"profile tuned-test (from default)", "held-out days:", "mean_jct_s", "gpu_idle_share", "objective gain",
		"run-time prediction on the held-out jobs"} {
		if !strings.Contains(a.String(), s) {
			t.Errorf("explain lacks %q:\n%s", s, a.String())
		}
	}
	if p := r.Predicted(); p["baseline_mean_jct_s"] != r.HeldOut.Before[MetricMeanJCT] ||
		p["window_mean_jct_s"] != r.Window.After[MetricMeanJCT] || p["window_baseline_gpu_idle_share"] != r.Window.Before[MetricGPUIdle] {
		t.Errorf("predicted %v", p)
	}
	// The window is the whole history once, under the current profile and
	// the proposal, each predicting from the published table.
	table, err := predict.FromTable(*r.Predictor)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(w.Cluster, w.Jobs, sim.Config{Params: r.Proposed.Params(), Predictor: TablePredictor{P: table},
		Workload: scoring.TypicalWorkload(sim.Requests(w.Jobs), 0.95)})
	if err != nil {
		t.Fatal(err)
	}
	if got := ValuesOf(res.Metrics); !reflect.DeepEqual(got, r.Window.After) || len(r.Window.Gains) != 1 {
		t.Errorf("window after = %v over %d replays, want one replay of the whole history: %v", r.Window.After, len(r.Window.Gains), got)
	}
	t.Log(a.String())
}

func TestFGDExperimentOrdersPolicies(t *testing.T) {
	// A seeded synthetic openb-like mix: whole, shared and CPU-only pods.
	c := &sim.Cluster{}
	for i := 0; i < 40; i++ {
		c.Nodes = append(c.Nodes, scoring.NewNode(fmt.Sprintf("n%02d", i), "G2", 8, 96000, 393216))
	}
	var pods []sim.Job
	shapes := []scoring.Request{{CPUMilli: 4000, GPUs: 1}, {CPUMilli: 3000, GPUs: 1, GPUMilli: 500},
		{CPUMilli: 2000, GPUs: 1, GPUMilli: 250}, {CPUMilli: 8000}, {CPUMilli: 16000, GPUs: 4}}
	for i := 0; i < 300; i++ {
		pods = append(pods, sim.Job{Name: fmt.Sprintf("p%03d", i), Members: 1, Request: shapes[i*7%len(shapes)]})
	}
	rows, err := FGDExperiment(context.Background(), c, pods, "default", scoring.Policies, []int64{42, 43}, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Seeds != 2 || r.Alloc130 <= 50 || r.Alloc130 > 100 {
			t.Errorf("row %+v", r)
		}
	}
	if rows[0].Policy != scoring.PolicyFGD || rows[0].Unallocated > rows[len(rows)-1].Unallocated {
		t.Errorf("FGD left more unallocated than random: %+v", rows)
	}
	// The paper's figures as the artifact's per-run files give them: two
	// seeds of FGD on this trace, one of random on another.
	at := func(at100, at130 float64) []float64 {
		v := make([]float64, 131)
		v[100], v[130] = at100, at130
		return v
	}
	paper := PaperFromResults([]trace.FGDResult{
		{Trace: "default", Policy: "06-FGD", Seed: 42, At: at(95.0, 95.5)},
		{Trace: "default", Policy: "06-FGD", Seed: 43, At: at(95.2, 95.7)},
		{Trace: "multigpu50", Policy: "01-Random", Seed: 42, At: at(80, 85)},
		{Trace: "default", Policy: "04-GpuPacking", Seed: 42, At: make([]float64, 50)}, // too short: left out
	}, nil)
	fgd := paper["default"]["fgd"]
	if fgd.Seeds != 2 || math.Abs(fgd.Unallocated-4.9) > 1e-9 || math.Abs(fgd.Alloc130-95.6) > 1e-9 ||
		math.Abs(fgd.UnallocatedSD-math.Sqrt(0.02)) > 1e-9 || paper["multigpu50"]["random"].Unallocated != 20 {
		t.Errorf("paper summarised as %+v", paper)
	}
	if _, ok := paper["default"]["packing"]; ok {
		t.Error("a run that never reached 100% was summarised")
	}
	var b strings.Builder
	if err := WriteFGDTable(&b, rows, paper); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"4.90 ± 0.14", "USENIX ATC 2023", "verdict per trace", "the paper's table", "multigpu50"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	t.Log(b.String())
}

func TestFGDVerdict(t *testing.T) {
	rows := []FGDRow{{Policy: scoring.PolicyFGD, Unallocated: 5}, {Policy: scoring.PolicyBestFit, Unallocated: 7}}
	paper := map[string]Published{"fgd": {Unallocated: 4.8, UnallocatedSD: 0.1}, "bestfit": {Unallocated: 5.2, UnallocatedSD: 0.2}}
	for _, tc := range []struct {
		rows  []FGDRow
		paper map[string]Published
		want  string
	}{
		{rows, paper, "FGD best, as in the paper; off the paper by more than the tolerance: bestfit +1.80"},
		{rows[:1], paper, "FGD best, as in the paper; every policy within tolerance of the paper"},
		{rows, nil, "FGD best, as in the paper; no published result for this list"},
		{[]FGDRow{rows[0], {Policy: scoring.PolicyPacking, Unallocated: 4}}, nil, "NOT as the paper: packing left fewer GPUs unallocated than FGD (4.00 < 5.00); no published result for this list"},
	} {
		if got := FGDVerdict(tc.rows, tc.paper); got != tc.want {
			t.Errorf("FGDVerdict = %q\nwant %q", got, tc.want)
		}
	}
}

// A proposal the weighted objective likes (idle share down a third) but
// that lengthens p95 JCT by 14% is not published, and the decision names
// p95 JCT; within the tolerance it publishes.
func TestGuardrailBlocksAWorseHeadlineNumber(t *testing.T) {
	g := DefaultGuardrails()
	o := DefaultObjective()
	ref := Values{MetricGPUIdle: 0.30, MetricMeanJCT: 1000, MetricP95JCT: 5000, MetricHighPriorityWait: 60, MetricFragmentation: 3}
	cand := Values{MetricGPUIdle: 0.20, MetricMeanJCT: 995, MetricP95JCT: 5700, MetricHighPriorityWait: 60, MetricFragmentation: 3}
	evals := func(v Values) Evaluation { return Evaluation{PerReplay: []Values{v, v, v}} }
	held := Compare(o, evals(cand), evals(ref))
	if held.Gain < g.Margin || held.Lower <= 0 {
		t.Fatalf("the case needs an objective gain past the margin: %+v", held)
	}
	d := g.Decide(held, true)
	if d.Publish || !strings.Contains(d.Reason, string(MetricP95JCT)) || !strings.Contains(d.Reason, "14.0% worse") {
		t.Errorf("p95 JCT +14%%: %+v, want not published, naming %s", d, MetricP95JCT)
	}
	cand[MetricP95JCT] = 5090 // +1.8%
	if d := g.Decide(Compare(o, evals(cand), evals(ref)), true); !d.Publish {
		t.Errorf("p95 JCT +1.8%% is within the 2%% tolerance: %+v", d)
	}
	// A high-priority wait near zero is judged against its floor, not zero.
	ref[MetricHighPriorityWait], cand[MetricHighPriorityWait] = 0, 0.01
	if d := g.Decide(Compare(o, evals(cand), evals(ref)), true); !d.Publish {
		t.Errorf("10 ms more high-priority wait from zero blocked: %+v", d)
	}
	if err := (Guardrails{Margin: 0.02, RollbackThreshold: 0.05, Bounds: DefaultBounds(), HeadlineTolerance: -0.1}).Validate(); err == nil || !strings.Contains(err.Error(), "headline tolerance") {
		t.Errorf("negative tolerance: %v", err)
	}
}

// The gang timeout bounds only a wait for members not yet created, which no
// replay of stored history contains, so no move of the search, in descent
// or in the policy grid, changes it.
func TestSearchLeavesTheGangTimeout(t *testing.T) {
	for _, timeout := range []time.Duration{0, 5 * time.Minute} {
		from := Candidate{scoring.DefaultParams()}
		from.GangTimeout = timeout
		all := append(moves(from, DefaultBounds(), 1, nil), policyGrid(from, nil)...)
		if len(all) == 0 {
			t.Fatal("no moves at all")
		}
		for _, mv := range all {
			if got := mv.apply(from).GangTimeout; got != timeout {
				t.Errorf("%s: gang timeout %v -> %v", mv.name, timeout, got)
			}
		}
	}
}

// A search limited to some knobs tries moves of those alone, and every knob
// has moves of its own.
func TestKnobsLimitTheMoves(t *testing.T) {
	from := Candidate{scoring.DefaultParams()}
	from.Queues = map[string]scoring.QueueLimit{"a": {MaxGPUs: 8}}
	from.Reservation = true
	seen := map[Knob]int{}
	for _, mv := range moves(from, DefaultBounds(), 1, nil) {
		seen[mv.knob]++
	}
	for _, k := range Knobs {
		if seen[k] == 0 {
			t.Errorf("no move of knob %s", k)
		}
	}
	only := []Knob{KnobWeights, KnobOrder}
	got := moves(from, DefaultBounds(), 1, only)
	if len(got) != seen[KnobWeights]+seen[KnobOrder] {
		t.Errorf("%d moves limited to %v, want %d", len(got), only, seen[KnobWeights]+seen[KnobOrder])
	}
	for _, mv := range got {
		if !slices.Contains(only, mv.knob) {
			t.Errorf("move %q of knob %s tried, limited to %v", mv.name, mv.knob, only)
		}
	}
}

func TestParseKnobs(t *testing.T) {
	tests := []struct {
		in   string
		want []Knob
		err  string
	}{
		{"", nil, ""},
		{"weights, queues,weights", []Knob{KnobWeights, KnobQueues}, ""},
		{"weights,order,", []Knob{KnobWeights, KnobOrder}, ""},
		{"weights,colour", nil, `knob "colour" is unknown`},
		{"weights,gangTimeout", nil, `knob "gangTimeout": the gang timeout is not searched`},
	}
	for _, tc := range tests {
		got, err := ParseKnobs(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseKnobs(%q) error = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseKnobs(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
	}
	if KnobList(Knobs) != "weights,queues,order,starvationBound,reservation,preemption" {
		t.Errorf("KnobList = %q", KnobList(Knobs))
	}
}
