package sim

import (
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/trace"
)

// migJobs are n one-member jobs arriving together, each asking for two 1g
// instances, in queue q.
func migJobs(n int) []trace.Job {
	var out []trace.Job
	for i := range n {
		out = append(out, trace.Job{Name: string(rune('a' + i)), Duration: 100 * time.Second, Members: 1, Queue: "q",
			MIG: map[string]int{"nvidia.com/mig-1g.10gb": 2}, Util: 1, Outcome: trace.Succeeded})
	}
	return out
}

func migCluster(instances int) *Cluster {
	return NewCluster(trace.Inventory{Nodes: []trace.Node{{Name: "n", GPUModel: "NVIDIA-A100-SXM4-80GB", CPUMilli: 64000, MemoryMiB: 1 << 20,
		MIG: map[string]int{"nvidia.com/mig-1g.10gb": instances}}}})
}

// Two 1g instances of a seven-slice GPU count 2 × 142 milli-GPU toward a
// queue: a one-GPU limit holds three such jobs (852) and makes the fourth
// (1136) wait for one to end, though the node has instances to spare.
func TestReplayCountsMIGInstancesTowardQueueLimits(t *testing.T) {
	for _, j := range migJobs(4) {
		if err := j.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1},
		Queues: map[string]scoring.QueueLimit{"q": {MaxGPUs: 1}}}}
	res := checkStarts(t, migCluster(14), JobsFromTrace(migJobs(4)), cfg, []time.Duration{0, 0, 0, sec(100)})
	for i, o := range res.Jobs {
		if o.State != Done {
			t.Errorf("job %d ended %s", i, o.State)
		}
	}
}

// A node's MIG instances are a capacity of their own: a job waits for
// instances of its profile to be freed, and one asking for a profile no
// node has never starts.
func TestReplayPlacesMIGInstances(t *testing.T) {
	cfg := Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}}
	checkStarts(t, migCluster(3), JobsFromTrace(migJobs(3)), cfg, []time.Duration{0, sec(100), sec(200)})

	other := migJobs(1)
	other[0].MIG = map[string]int{"nvidia.com/mig-3g.40gb": 1}
	res, err := Run(migCluster(3), JobsFromTrace(other), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o := res.Jobs[0]; o.State != Unschedulable {
		t.Errorf("a job asking for a profile no node has: %+v, want %s", o, Unschedulable)
	}
}
