package tuner

import (
	"context"
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/profile"
)

// reproInput is a tuning run on the committed Philly slice with a wide
// jitter, so the replays differ enough for a seed to matter.
func reproInput(t *testing.T) Input {
	return Input{Workload: phillySlice(t), Current: profile.Default(), Name: "tuned-repro", Objective: DefaultObjective(),
		Guard: DefaultGuardrails(), Replays: Replays{Count: 4, Jitter: 30 * time.Minute}, HoldoutFraction: 0.3,
		Rounds: 1, MinGain: 0.001, Source: Source{JobsFile: "pollux_philly_head300.csv"},
		Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }}
}

func reportJSON(t *testing.T, in Input) (Report, string) {
	t.Helper()
	r, err := Tune(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return r, string(b)
}

// firstDiff is the first line where a and b differ, for a readable failure.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return "line " + al[i] + "  vs  " + bl[i]
		}
	}
	return "lengths differ"
}

func TestTuneIsReproducible(t *testing.T) {
	in := reproInput(t)
	var first Report
	var want string
	// The same proposal twice under each GOMAXPROCS: the replays run in
	// parallel, so the worker count must not reach the figures.
	for i, procs := range []int{1, 4, 1, 4} {
		prev := runtime.GOMAXPROCS(procs)
		r, got := reportJSON(t, in)
		runtime.GOMAXPROCS(prev)
		if i == 0 {
			first, want = r, got
			continue
		}
		if got != want {
			t.Fatalf("run %d (GOMAXPROCS %d) reported differently: %s", i, procs, firstDiff(want, got))
		}
	}
	x := first.Inputs
	if !x.SeedDerived || x.Seed != DeriveSeed(HashJobs(in.Workload.Jobs), HashCluster(in.Workload.Cluster)) || x.Seed == 0 {
		t.Errorf("no seed given: inputs %+v, want the seed derived from the hashes", x)
	}
	if x.Jobs != len(in.Workload.Jobs) || x.Nodes != len(in.Workload.Cluster.Nodes) || len(x.JobsHash) != 64 ||
		x.Replays != 4 || x.JitterS != 1800 || x.Objective != in.Objective.String() || x.Guardrails != in.Guard ||
		x.Source.JobsFile == "" || x.Version == "" || x.Rounds != 1 || x.HoldoutFraction != 0.3 {
		t.Errorf("inputs do not name the run: %+v", x)
	}
	for _, m := range Metrics {
		if _, ok := first.HeldOut.Changes[m]; !ok {
			t.Errorf("no spread for %s", m)
		}
	}

	// An explicit seed is used as given and draws other jittered arrivals.
	in.Replays.Seed = x.Seed + 1
	other, _ := reportJSON(t, in)
	if other.Inputs.Seed != x.Seed+1 || other.Inputs.SeedDerived {
		t.Errorf("explicit seed recorded as %d (derived %v)", other.Inputs.Seed, other.Inputs.SeedDerived)
	}
	if slices.Equal(other.Train.Gains, first.Train.Gains) && other.Train.Before[MetricMeanJCT] == first.Train.Before[MetricMeanJCT] {
		t.Error("another seed replayed the same arrivals")
	}
	// A changed history changes the derived seed.
	in.Replays.Seed = 0
	in.Workload.Jobs = in.Workload.Jobs[1:]
	if r, _ := reportJSON(t, in); r.Inputs.Seed == x.Seed || r.Inputs.JobsHash == x.JobsHash {
		t.Error("a different history derived the same seed and hash")
	}
}

func TestSpreadWithinNoise(t *testing.T) {
	o := DefaultObjective()
	ref := Evaluation{PerReplay: []Values{{MetricMeanJCT: 100, MetricP95JCT: 1000}, {MetricMeanJCT: 100, MetricP95JCT: 1000},
		{MetricMeanJCT: 100, MetricP95JCT: 1000}}}
	cand := Evaluation{PerReplay: []Values{{MetricMeanJCT: 90, MetricP95JCT: 1200}, {MetricMeanJCT: 91, MetricP95JCT: 800},
		{MetricMeanJCT: 89, MetricP95JCT: 1050}}}
	c := Compare(o, cand, ref)
	jct, p95 := c.Changes[MetricMeanJCT], c.Changes[MetricP95JCT]
	if d := jct.Mean + 0.1; d > 1e-12 || d < -1e-12 || jct.WithinNoise() {
		t.Errorf("mean JCT change %+v: want -10%% and outside noise", jct)
	}
	if d := p95.Mean - 0.05/3*1; p95.StdErr <= 0 || !p95.WithinNoise() || d > 1e-12 || d < -1e-12 {
		t.Errorf("p95 JCT change %+v: want +1.7%% within noise", p95)
	}
	if got := change(c.Changes, MetricP95JCT, 3); !strings.Contains(got, "within noise") || !strings.Contains(got, "±") {
		t.Errorf("printed %q", got)
	}
}

func TestVerify(t *testing.T) {
	in := reproInput(t)
	in.Replays.Seed = 7
	stored, _ := reportJSON(t, in)
	again, err := InputFromReport(stored, in.Workload)
	if err != nil {
		t.Fatal(err)
	}
	again.Now = in.Now
	v, err := Verify(context.Background(), stored, again)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := v.Write(&out); err != nil {
		t.Fatal(err)
	}
	if !v.Matches() || !strings.Contains(out.String(), "verdict: matches") {
		t.Fatalf("a fresh report does not verify:\n%s", out.String())
	}

	// The same history with the last job to arrive (held out) running ten
	// hours longer.
	altered := in.Workload
	altered.Jobs = slices.Clone(in.Workload.Jobs)
	last := 0
	for i, j := range altered.Jobs {
		if j.Arrival >= altered.Jobs[last].Arrival {
			last = i
		}
	}
	altered.Jobs[last].Duration += 10 * time.Hour
	again.Workload = altered
	v, err = Verify(context.Background(), stored, again)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	v.Write(&out)
	if v.Matches() || !strings.Contains(out.String(), "verdict: differs") || !strings.Contains(out.String(), "held-out current mean_jct_s") ||
		!slices.Contains(v.Differing(), "held-out current mean_jct_s") {
		t.Errorf("an altered history verifies (differing %v):\n%s", v.Differing(), out.String())
	}
	if !strings.Contains(out.String(), "jobs sha256") || !strings.Contains(out.String(), "differs") {
		t.Errorf("the changed history hash is not shown:\n%s", out.String())
	}
}
