package tuner

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
)

// The estimate is the median stored wait of the jobs that had room when
// they arrived; a job that waited for another's GPUs does not count, however
// long it waited.
func TestStartLatency(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	row := func(name string, created, began, finished float64) schedloop.Job {
		return schedloop.Job{Namespace: "ns", Name: name, MinMember: 1, GPUsPerMember: 8,
			Created: at(created), FirstScheduled: at(began), Started: at(began), Finished: at(finished), Phase: schedloop.PhaseSucceeded}
	}
	hist := []schedloop.Job{
		row("a", 0, 0.4, 100.4),     // room on arrival: 0.4 s
		row("b", 1, 100.9, 150.9),   // waited for a: not counted
		row("c", 200, 200.2, 210.2), // room: 0.2 s
		row("d", 300, 300.9, 310.9), // room: 0.9 s
	}
	until := at(400)
	w := Workload{Cluster: &sim.Cluster{Depth: 1, Nodes: []*scoring.Node{scoring.NewNode("n", "A100", 8, 64000, 1<<20, "rack-0")}},
		Jobs: JobsFromHistory(hist, t0, until, 1)}
	p := scoring.Params{Weights: scoring.Weights{scoring.TermSpread: 1}}
	got, err := StartLatency(context.Background(), hist, w, sim.Config{}, p)
	if err != nil {
		t.Fatal(err)
	}
	if want := 400 * time.Millisecond; got != want {
		t.Errorf("start latency %v, want %v (the median of 0.2, 0.4 and 0.9 s)", got, want)
	}
	// The spread is every wait of a job with room, ascending.
	spread, err := StartLatencies(context.Background(), hist, w, sim.Config{}, p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 900 * time.Millisecond}; !slices.Equal(spread, want) {
		t.Errorf("spread %v, want %v", spread, want)
	}
	// Replayed with it, a job with room waits the latency.
	res, err := replayWhole(context.Background(), w, sim.Config{StartLatency: got}, FitPredictor(w.Jobs), p)
	if err != nil {
		t.Fatal(err)
	}
	if o := res.Jobs[2]; o.Start-w.Jobs[2].Arrival != got {
		t.Errorf("c started %v after arriving, want %v", o.Start-w.Jobs[2].Arrival, got)
	}
	// No job with room: no estimate.
	if got, err := StartLatency(context.Background(), hist[:0], Workload{Cluster: w.Cluster}, sim.Config{}, p); err != nil || got != 0 {
		t.Errorf("empty history: %v, %v; want 0", got, err)
	}
}
