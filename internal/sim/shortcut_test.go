package sim

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
)

// mixedWorkload is a seeded contended mix: lone pods of 1-8 GPUs, GPU
// shares, CPU-only pods, gangs of 2-6, two GPU models, two priorities,
// three queues and a few non-preemptible jobs, on racked nodes.
func mixedWorkload(seed uint64) (*Cluster, []Job) {
	rng := rand.New(rand.NewPCG(seed, 99))
	c := &Cluster{Depth: 1}
	for i := 0; i < 24; i++ {
		model := "A100"
		if i%3 == 0 {
			model = "H100"
		}
		c.Nodes = append(c.Nodes, scoring.NewNode(fmt.Sprintf("n%02d", i), model, 8, 64000, 512000, fmt.Sprintf("rack-%d", i/6)))
	}
	var jobs []Job
	at := time.Duration(0)
	for i := 0; i < 300; i++ {
		at += time.Duration(rng.IntN(40)) * time.Second
		j := Job{Name: fmt.Sprintf("j%03d", i), Arrival: at, Duration: time.Duration(30+rng.IntN(900)) * time.Second, Members: 1,
			Queue: []string{"a", "b", "c"}[rng.IntN(3)], Util: 0.5 + rng.Float64()/2, Request: scoring.Request{CPUMilli: 1000, MemoryMiB: 4096}}
		switch k := rng.IntN(10); {
		case k < 5:
			j.Request.GPUs = []int{1, 2, 4, 8}[rng.IntN(4)]
		case k < 7:
			j.Request.GPUs, j.Request.GPUMilli = 1, 250*(1+rng.IntN(3))
		case k < 8:
			// CPU only
		default:
			j.Members, j.Request.GPUs = 2+rng.IntN(5), []int{4, 8}[rng.IntN(2)]
		}
		if rng.IntN(8) == 0 {
			j.Request.GPUModels = []string{"H100"}
		}
		if rng.IntN(6) == 0 {
			j.Priority = 10
		}
		j.NonPreemptible = rng.IntN(10) == 0
		j.Predicted = time.Duration(float64(j.Duration) * (0.5 + rng.Float64()))
		jobs = append(jobs, j)
	}
	return c, jobs
}

// The idle-count shortcut only skips walks whose answer is known: every
// replay is the same with it as without it, under every order, with
// reservations, preemption, queue limits and gang timeouts.
func TestIdleCountShortcutChangesNothing(t *testing.T) {
	limits := map[string]scoring.QueueLimit{"a": {MaxGPUs: 48}, "b": {MaxRunningGangs: 2}}
	configs := map[string]Config{
		"arrival": {Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}},
		"shortest, reservation, limits": {Params: scoring.Params{Weights: scoring.Weights{scoring.TermBestFit: 1, scoring.TermFragmentation: 1},
			Order: scoring.OrderShortestService, Reservation: true, Queues: limits}},
		"fair share, starvation, preemption": {Params: scoring.Params{Weights: scoring.Weights{scoring.TermSpread: 1},
			Order: scoring.OrderFairShare, StarvationBound: 10 * time.Minute, GangTimeout: 30 * time.Second}, Preemption: true},
		"no backfill": {Params: scoring.Params{Weights: scoring.Weights{scoring.TermBestFit: 1}}, NoBackfill: true},
	}
	defer func() { skipWalks = true }()
	for name, cfg := range configs {
		for seed := uint64(1); seed <= 3; seed++ {
			c, jobs := mixedWorkload(seed)
			cfg.RecordPlacements = true
			skipWalks = true
			with, err := Run(c, jobs, cfg)
			if err != nil {
				t.Fatal(err)
			}
			skipWalks = false
			without, err := Run(c, jobs, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(with, without) {
				t.Errorf("%s, seed %d: the replay differs with the shortcut:\n with    %+v\n without %+v", name, seed, with.Metrics, without.Metrics)
			}
			if with.Metrics.Completed < len(jobs)/2 {
				t.Errorf("%s, seed %d: only %d of %d jobs completed: the workload does not exercise placement", name, seed, with.Metrics.Completed, len(jobs))
			}
		}
	}
}
