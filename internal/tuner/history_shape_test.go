package tuner

import (
	"reflect"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/trace"
)

// A trace's request shape goes into the job rows and comes back out as the
// replayed request.
func TestRequestShapeThroughImportAndHistory(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	tj := []trace.Job{
		{Name: "share", Members: 1, GPUs: 1, GPUMilli: 460, CPUMilli: 6000, MemoryMiB: 12288,
			GPUModels: []string{"V100M16", "V100M32"}, Duration: time.Hour},
		{Name: "cpu", Members: 1, CPUMilli: 4000, MemoryMiB: 8192, Arrival: time.Minute, Duration: time.Hour},
	}
	rows := JobsForImport(tj, t0, "trace")
	if r := rows[0]; r.CPUMilliPerMember != 6000 || r.MemoryMiBPerMember != 12288 ||
		!reflect.DeepEqual(r.GPUModels, tj[0].GPUModels) {
		t.Fatalf("import row: %+v", r)
	}
	jobs := JobsFromHistory(rows, t0, t0.Add(2*time.Hour), 0.5)
	want := []scoring.Request{
		{CPUMilli: 6000, MemoryMiB: 12288, GPUs: 1, GPUMilli: 460, GPUModels: []string{"V100M16", "V100M32"}},
		{CPUMilli: 4000, MemoryMiB: 8192},
	}
	for i, w := range want {
		if !reflect.DeepEqual(jobs[i].Request, w) {
			t.Errorf("replayed %s asks %+v, want %+v", jobs[i].Name, jobs[i].Request, w)
		}
	}
}
