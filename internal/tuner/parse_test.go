package tuner

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestObjectiveGolden parses each testdata/objective input and compares the
// canonical form (or the error) with its .golden file; bad_* inputs must fail.
func TestObjectiveGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "objective", "*.txt"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			o, err := ParseObjective(strings.TrimSpace(string(data)))
			bad := strings.HasPrefix(filepath.Base(in), "bad_")
			var got string
			switch {
			case bad && err == nil:
				t.Fatalf("parsed %q, want an error", data)
			case !bad && err != nil:
				t.Fatal(err)
			case err != nil:
				got = "error: " + err.Error() + "\n"
			default:
				got = o.String() + "\n"
			}
			golden := in + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal([]byte(got), want) {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}

func FuzzParseObjective(f *testing.F) {
	inputs, _ := filepath.Glob(filepath.Join("testdata", "objective", "*.txt"))
	for _, in := range inputs {
		if data, err := os.ReadFile(in); err == nil {
			f.Add(string(data))
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseObjective(s)
		if err != nil {
			return
		}
		again, err := ParseObjective(o.String())
		if err != nil || again.String() != o.String() {
			t.Fatalf("%q -> %q does not round-trip: %v", s, o.String(), err)
		}
		ref := Values{MetricGPUIdle: 0.1, MetricMeanJCT: 10, MetricP95JCT: 20, MetricHighPriorityWait: 5, MetricFragmentation: 1}
		if c := o.Cost(ref, ref); c < 0.999999 || c > 1.000001 {
			t.Fatalf("%q: the reference costs %v", s, c)
		}
	})
}

func TestJobsFromHistory(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	until := t0.Add(10 * time.Hour)
	jobs := []schedloop.Job{
		{Namespace: "a", Name: "done", MinMember: 2, GPUsPerMember: 8, Created: t0.Add(time.Hour),
			Admitted: t0.Add(2 * time.Hour), Finished: t0.Add(5 * time.Hour), Queue: "q", Priority: 3},
		{Namespace: "a", Name: "running", GPUsPerMember: 1, GPUMilliPerMember: 250, Created: t0.Add(8 * time.Hour),
			Started: t0.Add(9 * time.Hour)},
		{Namespace: "a", Name: "never", GPUsPerMember: 1, Created: t0},
		{Namespace: "a", Name: "late", GPUsPerMember: 1, Created: t0.Add(9 * time.Hour), Admitted: until.Add(time.Minute)},
		// Admitted at 1h, evicted, run again from 3h to 4h.
		{Namespace: "a", Name: "rerun", GPUsPerMember: 1, Created: t0, Admitted: t0.Add(time.Hour),
			LastRunBegan: t0.Add(3 * time.Hour), Finished: t0.Add(4 * time.Hour)},
	}
	got := JobsFromHistory(jobs, t0, until, 0.5)
	if len(got) != 3 {
		t.Fatalf("got %d jobs, want 3 (a job that never ran, or began after until, has no run time in the window)", len(got))
	}
	if g := got[2]; g.Name != "a/rerun" || g.Arrival != 0 || g.Duration != time.Hour {
		t.Errorf("rerun: %+v; want its last run's hour, which the replay runs again whole if it evicts it", g)
	}
	jobs = jobs[:4]
	if g := got[0]; g.Name != "a/done" || g.Arrival != time.Hour || g.Duration != 3*time.Hour || g.Members != 2 ||
		g.Request.GPUs != 8 || g.Queue != "q" || g.Priority != 3 || g.Util != 0.5 {
		t.Errorf("done: %+v", g)
	}
	if g := got[1]; g.Duration != time.Hour || !g.Request.Shared() || g.Request.GPUMilli != 250 || g.Members != 1 {
		t.Errorf("running: %+v", g)
	}
	m := MeasureJobs(jobs, 1)
	if m[MetricMeanJCT] != 4*3600 || m[MetricHighPriorityWait] != 3600 {
		t.Errorf("measured %v", m)
	}
	c := ClusterFromNodes([]schedloop.Node{
		{Name: "b", GPUCount: 8, GPUModel: "H100", Topology: map[string]string{"rack": "r1"}},
		{Name: "a", GPUCount: 4, GPUModel: "H100", Labels: map[string]string{"rack": "r2"}},
	}, []string{"rack"})
	if len(c.Nodes) != 2 || c.Nodes[0].Name != "a" || c.Nodes[0].Domains[0] != "r2" || c.Nodes[1].GPUCap() != 8 || c.Depth != 1 {
		t.Errorf("cluster %+v", c.Nodes)
	}
}
