package tuner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
)

// Input is everything one tuning run needs.
type Input struct {
	Workload  Workload
	Current   profile.Document
	Name      string // the proposal's profile name
	Objective Objective
	Guard     Guardrails
	// Replays.Seed 0 derives the seed from the workload (DeriveSeed).
	Replays Replays
	// Source is where Workload was read from, recorded in the report.
	Source Source
	// HoldoutFraction is the later share of the history (by arrival time)
	// kept out of the search and used only to judge the winner.
	HoldoutFraction float64
	Rounds          int
	MinGain         float64
	// Knobs are the parameters the search may move (SearchOptions.Knobs);
	// empty means every one.
	Knobs []Knob
	// Base carries replay settings that are not tuned.
	Base     sim.Config
	Progress func(done, total int, best float64)
	Now      func() time.Time
}

// Report is the evidence of one tuning run; it is stored with the profile
// and printed by `tuner explain`.
type Report struct {
	Name      string           `json:"name"`
	Current   profile.Document `json:"current"`
	Proposed  profile.Document `json:"proposed"`
	Changes   []string         `json:"changes"`
	Objective string           `json:"objective"`
	Margin    float64          `json:"margin"`
	Inputs    Inputs           `json:"inputs"`
	TrainJobs int              `json:"trainJobs"`
	HeldJobs  int              `json:"heldOutJobs"`
	CutS      float64          `json:"cutSeconds"`
	Train     Comparison       `json:"train"`
	HeldOut   Comparison       `json:"heldOut"`
	// Window is the whole history replayed once as recorded (no jitter),
	// under the current profile and under the proposal, both predicting
	// run times from the published predictor table as the scheduler does:
	// what the same jobs submitted again should measure under each. The
	// held-out comparison judges; this one is what a replay of the same
	// window is compared with.
	Window   Comparison `json:"window"`
	Decision Decision   `json:"decision"`
	// Prediction is the run-time predictor's accuracy on the held-out
	// history, each job predicted from the jobs finished before it.
	Prediction predict.Accuracy `json:"prediction"`
	// Predictor is the run-time predictor fitted on the whole history,
	// published with the profile so the scheduler predicts as the replays
	// did.
	Predictor   *predict.Table `json:"predictor,omitempty"`
	Steps       []Step         `json:"steps"`
	Evaluations int            `json:"evaluations"`
	ElapsedS    float64        `json:"elapsedSeconds"`
	Created     time.Time      `json:"created"`
}

// Tune searches for a better profile on the earlier part of the workload
// and judges it on the held-out later part.
func Tune(ctx context.Context, in Input) (Report, error) {
	if in.Now == nil {
		in.Now = time.Now
	}
	start := in.Now()
	if err := in.Guard.Validate(); err != nil {
		return Report{}, err
	}
	if in.HoldoutFraction <= 0 || in.HoldoutFraction >= 1 {
		return Report{}, fmt.Errorf("hold-out fraction %v is outside (0, 1)", in.HoldoutFraction)
	}
	inputs := in.inputs()
	in.Replays.Seed = inputs.Seed
	train, held, cut := SplitByTime(in.Workload.Jobs, 1-in.HoldoutFraction)
	if len(train) == 0 || len(held) == 0 {
		return Report{}, fmt.Errorf("the history of %d jobs cannot be split into training and held-out days", len(in.Workload.Jobs))
	}
	cur := FromDocument(in.Current)
	te := NewEvaluator(Workload{Cluster: in.Workload.Cluster, Jobs: train}, in.Replays, in.Base)
	best, bestEval, steps, err := Search(ctx, te, cur, SearchOptions{Objective: in.Objective, Bounds: in.Guard.Bounds,
		Rounds: in.Rounds, MinGain: in.MinGain, Knobs: in.Knobs, Progress: in.Progress})
	if err != nil {
		return Report{}, fmt.Errorf("search: %w", err)
	}
	curTrain, err := te.Evaluate(ctx, cur)
	if err != nil {
		return Report{}, err
	}
	he := NewEvaluator(Workload{Cluster: in.Workload.Cluster, Jobs: HeldOutAfterTraining(in.Workload.Jobs, cut)}, in.Replays, in.Base)
	curHeld, err := he.Evaluate(ctx, cur)
	if err != nil {
		return Report{}, err
	}
	bestHeld, err := he.Evaluate(ctx, best)
	if err != nil {
		return Report{}, err
	}
	proposed := best.Document(in.Name)
	r := Report{
		Name: in.Name, Current: in.Current, Proposed: proposed, Changes: profile.Diff(in.Current, proposed),
		Objective: in.Objective.String(), Margin: in.Guard.Margin, Inputs: inputs, TrainJobs: len(train), HeldJobs: len(held), CutS: cut.Seconds(),
		Train: Compare(in.Objective, bestEval, curTrain), HeldOut: Compare(in.Objective, bestHeld, curHeld),
		Steps: steps, Evaluations: te.Evaluations() + he.Evaluations(), Created: in.Now().UTC(), Prediction: curHeld.Prediction,
	}
	r.Decision = in.Guard.Decide(r.HeldOut, best.Key() != cur.Key())
	table := FitPredictor(in.Workload.Jobs)
	r.Predictor = &table
	if r.Window, err = windowComparison(ctx, in.Objective, in.Workload, in.Base, table, cur, best); err != nil {
		return Report{}, err
	}
	r.ElapsedS = in.Now().Sub(start).Seconds()
	return r, nil
}

// windowComparison replays the whole workload once under cur and under
// best, each predicting from table as the scheduler will.
func windowComparison(ctx context.Context, o Objective, w Workload, base sim.Config, table predict.Table, cur, best Candidate) (Comparison, error) {
	var ev [2]Evaluation
	for i, c := range []Candidate{cur, best} {
		res, err := replayWhole(ctx, w, base, table, c.Params)
		if err != nil {
			return Comparison{}, err
		}
		ev[i] = Evaluation{PerReplay: []Values{ValuesOf(res.Metrics)}, Prediction: predictionAccuracy(w.Jobs, res)}
	}
	return Compare(o, ev[1], ev[0]), nil
}

// replayWhole replays the whole workload once under p, predicting from
// table as the scheduler will.
func replayWhole(ctx context.Context, w Workload, base sim.Config, table predict.Table, p scoring.Params) (sim.Result, error) {
	pr, err := predict.FromTable(table)
	if err != nil {
		return sim.Result{}, fmt.Errorf("window replay: %w", err)
	}
	cfg := base
	cfg.Params, cfg.Workload, cfg.Predictor, cfg.Kueue = p.Clone(), scoring.TypicalWorkload(sim.Requests(w.Jobs), 0.95), TablePredictor{P: pr}, w.Kueue
	res, err := sim.RunContext(ctx, w.Cluster, w.Jobs, cfg)
	if err != nil {
		return sim.Result{}, fmt.Errorf("window replay: %w", err)
	}
	return res, nil
}

// inputs names what the run reads, with the seed it replays under.
func (in Input) inputs() Inputs {
	r := in.Replays
	if r.Count < 1 {
		r.Count = 1
	}
	x := Inputs{Seed: r.Seed, Replays: r.Count, JitterS: r.Jitter.Seconds(), Source: in.Source,
		Jobs: len(in.Workload.Jobs), JobsHash: HashJobs(in.Workload.Jobs), Nodes: len(in.Workload.Cluster.Nodes),
		InventoryHash: HashCluster(in.Workload.Cluster), Objective: in.Objective.String(), Guardrails: in.Guard,
		HoldoutFraction: in.HoldoutFraction, Rounds: in.Rounds, MinGain: in.MinGain, Knobs: in.Knobs, Preemption: in.Base.Preemption,
		HighPriority: in.Base.HighPriority, PercentageOfNodesToScore: in.Base.PercentageOfNodesToScore,
		StartLatencyS: in.Base.StartLatency.Seconds(), Version: Version()}
	for _, d := range in.Base.StartLatencySpread {
		x.StartLatencySpreadS = append(x.StartLatencySpreadS, d.Seconds())
	}
	if x.Seed == 0 {
		x.Seed, x.SeedDerived = DeriveSeed(x.JobsHash, x.InventoryHash), true
	}
	return x
}

// Evidence is the report as the JSON document stored with the profile.
func (r Report) Evidence() (map[string]any, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode evidence: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("encode evidence: %w", err)
	}
	return m, nil
}

// ReportFromEvidence reads back a stored report.
func ReportFromEvidence(ev map[string]any) (Report, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return Report{}, fmt.Errorf("decode evidence: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return Report{}, fmt.Errorf("decode evidence: %w", err)
	}
	return r, nil
}

// Predicted is the held-out outcome the proposal promises, with the current
// profile's held-out outcome under baseline_ names, and the whole window's
// under window_ and window_baseline_ names, as stored beside what is later
// measured.
func (r Report) Predicted() map[string]float64 {
	out := map[string]float64{"gain": r.HeldOut.Gain}
	for m, v := range r.HeldOut.After {
		out[string(m)] = v
	}
	for m, v := range r.HeldOut.Before {
		out["baseline_"+string(m)] = v
	}
	for m, v := range r.Window.After {
		out[WindowPrefix+string(m)] = v
	}
	for m, v := range r.Window.Before {
		out[WindowPrefix+"baseline_"+string(m)] = v
	}
	return out
}

// WindowPrefix names Report.Window's figures in Predicted.
const WindowPrefix = "window_"

// Explain writes what changed and why, with the numbers.
func (r Report) Explain(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "profile %s (from %s), %s\n", r.Name, r.Current.Name, r.Created.Format(time.RFC3339))
	verdict := "not published"
	if r.Decision.Publish {
		verdict = "published"
	}
	fmt.Fprintf(tw, "decision: %s: %s\n", verdict, r.Decision.Reason)
	fmt.Fprintf(tw, "objective: %s (lower is better; gains are relative)\n", r.Objective)
	in := r.Inputs
	fmt.Fprintf(tw, "evidence: %d training jobs, %d held-out jobs after %s (replayed after the training jobs, which count only as load); %d replays (arrival jitter ±%s); %d simulations in %v\n",
		r.TrainJobs, r.HeldJobs, time.Duration(r.CutS*float64(time.Second)).Round(time.Second), in.Replays,
		time.Duration(in.JitterS*float64(time.Second)), r.Evaluations, time.Duration(r.ElapsedS*float64(time.Second)).Round(time.Millisecond))
	seed := fmt.Sprintf("%d", in.Seed)
	if in.SeedDerived {
		seed += " (derived from the history and inventory hashes)"
	}
	fmt.Fprintf(tw, "inputs: seed %s; %s\n", seed, in.Source)
	fmt.Fprintf(tw, "  %d jobs, sha256 %s; %d nodes, sha256 %s\n", in.Jobs, short(in.JobsHash), in.Nodes, short(in.InventoryHash))
	fmt.Fprintf(tw, "  hold-out %g, %d rounds, min gain %g, preemption %t, high priority >= %d, percentageOfNodesToScore %d, start latency %gs%s; version %s\n",
		in.HoldoutFraction, in.Rounds, in.MinGain, in.Preemption, in.HighPriority, in.PercentageOfNodesToScore, in.StartLatencyS, in.spread(), in.Version)
	fmt.Fprintf(tw, "check: %s\n", r.VerifyCommand())
	if p := r.Prediction; p.Jobs > 0 {
		fmt.Fprintf(tw, "run-time prediction on the held-out jobs (each from the jobs finished before it): Spearman %.2f, %.0f%% within 2x of actual, %d jobs\n",
			p.Spearman, 100*p.Within2x, p.Jobs)
	}
	fmt.Fprintln(tw, "\nchanges:")
	if len(r.Changes) == 0 {
		fmt.Fprintln(tw, "  none")
	}
	for _, c := range r.Changes {
		fmt.Fprintf(tw, "  %s\n", c)
	}
	for _, part := range []struct {
		name string
		c    Comparison
	}{{"training days", r.Train}, {"held-out days", r.HeldOut}, {"whole window, table predictions", r.Window}} {
		fmt.Fprintf(tw, "\n%s:\tcurrent\tproposed\tchange ± s.e. over replays\n", part.name)
		for _, m := range Metrics {
			b, a := part.c.Before[m], part.c.After[m]
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", m, num(b), num(a), change(part.c.Changes, m, len(part.c.Gains)))
		}
		fmt.Fprintf(tw, "  objective gain\t\t\t%+.2f%% ± %.2f%% (95%% lower bound %+.2f%%, %d/%d replays better)\n",
			100*part.c.Gain, 100*part.c.StdErr, 100*part.c.Lower, part.c.Wins, len(part.c.Gains))
	}
	var kept []string
	for _, s := range r.Steps {
		if s.Accepted {
			kept = append(kept, fmt.Sprintf("  %s (training gain %+.2f%%, %d replays better)", s.Move, 100*s.Gain, s.Wins))
		}
	}
	fmt.Fprintf(tw, "\nsearch: %d moves tried, %d kept\n", len(r.Steps), len(kept))
	fmt.Fprint(tw, strings.Join(kept, "\n"))
	if len(kept) > 0 {
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func num(v float64) string {
	if v != 0 && (v < 0.01 && v > -0.01) {
		return fmt.Sprintf("%.5f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

// change prints a metric's mean relative change with its standard error,
// and says when the change is within noise.
func change(ch map[Metric]Spread, m Metric, replays int) string {
	sp, ok := ch[m]
	switch {
	case !ok:
		return "n/a"
	case sp.Mean == 0 && sp.StdErr == 0:
		return "0"
	case replays < 2:
		return fmt.Sprintf("%+.1f%% (one replay: no spread)", 100*sp.Mean)
	case sp.WithinNoise():
		return fmt.Sprintf("%+.1f%% ± %.1f%% (within noise)", 100*sp.Mean, 100*sp.StdErr)
	}
	return fmt.Sprintf("%+.1f%% ± %.1f%%", 100*sp.Mean, 100*sp.StdErr)
}

func short(hash string) string { return hash[:min(16, len(hash))] }

// VerifyCommand is the command that replays this report's inputs and
// compares the figures.
func (r Report) VerifyCommand() string { return "tuner verify " + r.Name }
