package tuner

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
)

// BenchmarkCandidates evaluates candidate profiles on the openb default
// trace (8,152 pods, 1,213 GPU nodes) the way the search does: one replay
// per candidate, candidates spread over every core. It reports candidate
// evaluations per second of wall time.
func BenchmarkCandidates(b *testing.B) {
	dir := os.Getenv("SCHEDLOOP_OPENB_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "traces", "alibaba-gpu-2023")
	}
	pods := filepath.Join(dir, "openb_pod_list_default.csv")
	if _, err := os.Stat(pods); err != nil {
		b.Skipf("needs the openb trace: %s (set SCHEDLOOP_OPENB_DIR)", pods)
	}
	inv, err := trace.LoadInventory(filepath.Join(dir, "openb_node_list_gpu_node.csv"), trace.FormatAuto, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	tj, err := trace.LoadJobs(pods, trace.FormatAuto)
	if err != nil {
		b.Fatal(err)
	}
	w := Workload{Cluster: sim.NewCluster(inv), Jobs: sim.JobsFromTrace(tj)}
	// One replay per candidate; the evaluator runs GOMAXPROCS candidates'
	// replays at once by giving it that many identical replays.
	par := runtime.GOMAXPROCS(0)
	e := NewEvaluator(w, Replays{Count: par}, sim.Config{Preemption: true, HighPriority: 1})
	cands := []Candidate{
		{scoring.DefaultParams()},
		{scoring.Params{Weights: scoring.Weights{scoring.TermFragmentation: 10, scoring.TermBestFit: 2}}},
		{scoring.Params{Weights: scoring.Weights{scoring.TermBestFit: 5, scoring.TermTopology: 10}}},
		{scoring.Params{Weights: scoring.Weights{scoring.TermPacking: 3, scoring.TermFragmentation: 5}}},
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.Evaluate(context.Background(), cands[i%len(cands)]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*par)/b.Elapsed().Seconds(), "tuner_candidates_per_s@candidates/s")
}
