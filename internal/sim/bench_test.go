package sim

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/trace"
)

// openbDir is the Alibaba openb trace, read in place (it may not be copied
// into the project). Override with SCHEDLOOP_OPENB_DIR.
func openbDir() string {
	if d := os.Getenv("SCHEDLOOP_OPENB_DIR"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "..", "shared", "traces", "alibaba-gpu-2023")
}

func loadOpenb(b *testing.B) (*Cluster, []Job) {
	b.Helper()
	dir := openbDir()
	nodes := filepath.Join(dir, "openb_node_list_gpu_node.csv")
	pods := filepath.Join(dir, "openb_pod_list_default.csv")
	if _, err := os.Stat(pods); err != nil {
		b.Skipf("needs the openb trace: %s (set SCHEDLOOP_OPENB_DIR)", pods)
	}
	inv, err := trace.LoadInventory(nodes, trace.FormatAuto, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	tj, err := trace.LoadJobs(pods, trace.FormatAuto)
	if err != nil {
		b.Fatal(err)
	}
	return NewCluster(inv), JobsFromTrace(tj)
}

// BenchmarkOpenbReplay replays the openb default trace (8,152 pods, 1,213
// GPU nodes) once per iteration under the default profile.
func BenchmarkOpenbReplay(b *testing.B) {
	c, jobs := loadOpenb(b)
	cfg := Config{Params: scoring.DefaultParams(), Workload: scoring.TypicalWorkload(Requests(jobs), 0.95)}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Run(c, jobs, cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "tuner_openb_replay_s@s")
}

// BenchmarkFGDFill is one seed of the FGD paper's experiment under FGD.
func BenchmarkFGDFill(b *testing.B) {
	c, jobs := loadOpenb(b)
	w := scoring.TypicalWorkload(Requests(jobs), 0.95)
	pods := InflateFGD(jobs, c.GPUMilli(), 1.3, 42)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Fill(c, pods, scoring.PolicyFGD, w, 42)
	}
}
