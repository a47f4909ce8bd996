package tuner

import (
	"context"
	"fmt"
	"io"
	"math"
	"reflect"
	"text/tabwriter"
	"time"
)

// InputFromReport is the tuning run a stored report names: the same
// settings, seed, current profile and proposal name, on w (the workload
// read again from the report's Source).
func InputFromReport(r Report, w Workload) (Input, error) {
	x := r.Inputs
	o, err := ParseObjective(x.Objective)
	if err != nil {
		return Input{}, fmt.Errorf("stored objective: %w", err)
	}
	if x.Seed == 0 {
		return Input{}, fmt.Errorf("the report of %s records no seed: it predates seeded runs and cannot be replayed", r.Name)
	}
	in := Input{Workload: w, Current: r.Current, Name: r.Name, Objective: o, Guard: x.Guardrails, Source: x.Source,
		Replays:         Replays{Count: x.Replays, Jitter: time.Duration(x.JitterS * float64(time.Second)), Seed: x.Seed},
		HoldoutFraction: x.HoldoutFraction, Rounds: x.Rounds, MinGain: x.MinGain, Knobs: x.Knobs}
	in.Base.Preemption, in.Base.HighPriority, in.Base.PercentageOfNodesToScore = x.Preemption, x.HighPriority, x.PercentageOfNodesToScore
	in.Base.StartLatency = time.Duration(x.StartLatencyS * float64(time.Second))
	for _, v := range x.StartLatencySpreadS {
		in.Base.StartLatencySpread = append(in.Base.StartLatencySpread, time.Duration(math.Round(v*1e9)))
	}
	return in, nil
}

// Verification is a stored report set beside the same run made again.
type Verification struct {
	Stored, Recomputed Report
	// Figures are every compared number, in a fixed order.
	Figures []Figure
	// Differs counts the figures that differ, plus one each for a
	// different proposal and a different decision.
	Differs int
}

// Figure is one number of the evidence, stored and recomputed.
type Figure struct {
	Name               string
	Stored, Recomputed float64
}

// Same reports whether the figures agree. A replay is deterministic, so
// they must be equal; the tolerance only absorbs the last bit of a
// floating-point sum.
func (f Figure) Same() bool {
	return math.Abs(f.Stored-f.Recomputed) <= 1e-9*math.Max(1, math.Abs(f.Stored))
}

// Verify replays in (from InputFromReport) and compares the figures with
// stored's.
func Verify(ctx context.Context, stored Report, in Input) (Verification, error) {
	re, err := Tune(ctx, in)
	if err != nil {
		return Verification{}, fmt.Errorf("replay %s: %w", stored.Name, err)
	}
	// The seed was given back explicitly; whether it was first derived is
	// the stored run's fact.
	re.Inputs.SeedDerived = stored.Inputs.SeedDerived
	v := Verification{Stored: stored, Recomputed: re}
	add := func(name string, a, b float64) { v.Figures = append(v.Figures, Figure{name, a, b}) }
	add("training jobs", float64(stored.TrainJobs), float64(re.TrainJobs))
	add("held-out jobs", float64(stored.HeldJobs), float64(re.HeldJobs))
	for _, part := range []struct {
		name string
		a, b Comparison
	}{{"training", stored.Train, re.Train}, {"held-out", stored.HeldOut, re.HeldOut}} {
		for _, m := range Metrics {
			add(fmt.Sprintf("%s current %s", part.name, m), part.a.Before[m], part.b.Before[m])
			add(fmt.Sprintf("%s proposed %s", part.name, m), part.a.After[m], part.b.After[m])
		}
		add(part.name+" objective gain", part.a.Gain, part.b.Gain)
		add(part.name+" gain std. error", part.a.StdErr, part.b.StdErr)
	}
	add("run-time prediction Spearman", stored.Prediction.Spearman, re.Prediction.Spearman)
	add("run-time prediction within 2x", stored.Prediction.Within2x, re.Prediction.Within2x)
	for _, f := range v.Figures {
		if !f.Same() {
			v.Differs++
		}
	}
	if !reflect.DeepEqual(stored.Proposed, re.Proposed) {
		v.Differs++
	}
	if stored.Decision != re.Decision {
		v.Differs++
	}
	return v, nil
}

// Differing names the figures that did not recompute as stored.
func (v Verification) Differing() []string {
	var out []string
	for _, f := range v.Figures {
		if !f.Same() {
			out = append(out, f.Name)
		}
	}
	if !reflect.DeepEqual(v.Stored.Proposed, v.Recomputed.Proposed) {
		out = append(out, "proposal")
	}
	if v.Stored.Decision != v.Recomputed.Decision {
		out = append(out, "decision")
	}
	return out
}

// Matches reports whether every figure, the proposal and the decision
// came out as stored.
func (v Verification) Matches() bool { return v.Differs == 0 }

// Write prints the inputs, stored and recomputed figures side by side and
// the verdict.
func (v Verification) Write(w io.Writer) error {
	s, r := v.Stored, v.Recomputed
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "verify %s: replayed %s with seed %d, %d replays\n\n", s.Name, s.Inputs.Source, s.Inputs.Seed, s.Inputs.Replays)
	fmt.Fprintln(tw, "input\tstored\tnow\t")
	for _, in := range []struct{ name, a, b string }{
		{"jobs", fmt.Sprint(s.Inputs.Jobs), fmt.Sprint(r.Inputs.Jobs)},
		{"jobs sha256", short(s.Inputs.JobsHash), short(r.Inputs.JobsHash)},
		{"nodes", fmt.Sprint(s.Inputs.Nodes), fmt.Sprint(r.Inputs.Nodes)},
		{"inventory sha256", short(s.Inputs.InventoryHash), short(r.Inputs.InventoryHash)},
		{"version", s.Inputs.Version, r.Inputs.Version},
	} {
		mark := ""
		if in.a != in.b {
			mark = "differs"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", in.name, in.a, in.b, mark)
	}
	fmt.Fprintln(tw, "\nfigure\tstored\trecomputed\tdifference")
	for _, f := range v.Figures {
		d := "same"
		if !f.Same() {
			d = "DIFFERS " + diff(f.Stored, f.Recomputed)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", f.Name, num(f.Stored), num(f.Recomputed), d)
	}
	same := func(ok bool) string {
		if ok {
			return "same"
		}
		return "DIFFERS"
	}
	fmt.Fprintf(tw, "  proposal\t%s\t%s\t%s\n", s.Proposed.Name, r.Proposed.Name, same(reflect.DeepEqual(s.Proposed, r.Proposed)))
	fmt.Fprintf(tw, "  decision\t%s\t%s\t%s\n", publishWord(s.Decision), publishWord(r.Decision), same(s.Decision == r.Decision))
	if err := tw.Flush(); err != nil {
		return err
	}
	if v.Matches() {
		_, err := fmt.Fprintf(w, "\nverdict: matches: all %d figures, the proposal and the decision recomputed as stored\n", len(v.Figures))
		return err
	}
	var worst Figure
	for _, f := range v.Figures {
		if !f.Same() && (worst.Name == "" || relDiff(f) > relDiff(worst)) {
			worst = f
		}
	}
	msg := fmt.Sprintf("\nverdict: differs: %d of %d figures", v.Differs, len(v.Figures)+2)
	if worst.Name != "" {
		msg += fmt.Sprintf(", most %s (%s)", worst.Name, diff(worst.Stored, worst.Recomputed))
	}
	_, err := fmt.Fprintln(w, msg)
	return err
}

func publishWord(d Decision) string {
	if d.Publish {
		return "publish"
	}
	return "keep current"
}

func relDiff(f Figure) float64 {
	return math.Abs(f.Recomputed-f.Stored) / math.Max(math.Abs(f.Stored), 1e-12)
}

func diff(stored, recomputed float64) string {
	if stored == 0 {
		return fmt.Sprintf("%+.4g", recomputed-stored)
	}
	return fmt.Sprintf("%+.4g, %+.2f%%", recomputed-stored, 100*(recomputed-stored)/math.Abs(stored))
}
