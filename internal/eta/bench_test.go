package eta

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
)

// bigSnapshot is a busy 10,000-GPU cluster: 1,250 nodes of 8 GPUs in racks
// of 16, every GPU held by a running job (lone pods of 1-8 GPUs and gangs
// of whole nodes), and 2,000 pending jobs of the same mix in two
// priorities and four queues, seeded.
func bigSnapshot() Snapshot {
	rng := rand.New(rand.NewPCG(10000, 2000))
	c := &sim.Cluster{Depth: 1}
	for i := 0; i < 1250; i++ {
		c.Nodes = append(c.Nodes, scoring.NewNode(fmt.Sprintf("n%04d", i), "H100", 8, 0, 0, fmt.Sprintf("rack-%03d", i/16)))
	}
	snap := Snapshot{Cluster: c, Config: sim.Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBestFit: 1}}}}
	runTime := func() time.Duration { return time.Duration(5+rng.IntN(600)) * time.Minute }
	sizes := []int{1, 1, 2, 4, 8}
	for n := 0; n < len(c.Nodes); {
		if rng.IntN(10) == 0 && n+4 <= len(c.Nodes) {
			nodes := make([]string, 4)
			for k := range nodes {
				nodes[k] = c.Nodes[n+k].Name
			}
			snap.Jobs = append(snap.Jobs, Job{Job: sim.Job{Name: fmt.Sprintf("run-gang-%d", n), Members: 4, Request: scoring.Request{GPUs: 8},
				Predicted: runTime(), RunningOn: nodes, Util: 1}, Elapsed: runTime() / 2})
			n += 4
			continue
		}
		for free := 8; free > 0; {
			g := min(sizes[rng.IntN(len(sizes))], free)
			snap.Jobs = append(snap.Jobs, Job{Job: sim.Job{Name: fmt.Sprintf("run-%d-%d", n, free), Members: 1, Request: scoring.Request{GPUs: g},
				Predicted: runTime(), RunningOn: []string{c.Nodes[n].Name}, Util: 1}, Elapsed: runTime() / 2})
			free -= g
		}
		n++
	}
	for i := 0; i < 2000; i++ {
		j := Job{Job: sim.Job{Name: fmt.Sprintf("pending-%04d", i), Members: 1, Request: scoring.Request{GPUs: sizes[rng.IntN(len(sizes))]},
			Predicted: runTime(), Queued: time.Duration(rng.IntN(3600)) * time.Second, Queue: fmt.Sprintf("team-%d", i%4), Util: 1}}
		if i%10 == 0 {
			j.Members, j.Request.GPUs = 2+rng.IntN(7), 8
		}
		if i%20 == 0 {
			j.Priority = 100
		}
		snap.Jobs = append(snap.Jobs, j)
	}
	return snap
}

// BenchmarkForecastAllPending is the estimate of every pending job of a
// busy 10,000-GPU cluster with 2,000 pending jobs, at the default number
// of runs: eta_all_pending_ms.
var benchRuns = DefaultRuns

func BenchmarkForecastAllPending(b *testing.B) {
	snap := bigSnapshot()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		est, err := Forecast(context.Background(), snap, Options{Seed: uint64(i), Runs: benchRuns})
		if err != nil {
			b.Fatal(err)
		}
		if len(est) != 2000 {
			b.Fatalf("%d estimates, want 2000", len(est))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "eta_all_pending_ms@ms")
}

// BenchmarkNewErrorModel measures the error as the live estimate does
// before each Forecast: two weeks of a busy cluster's finished jobs and
// the 10,000-GPU benchmark cluster's running ones, seeded.
func BenchmarkNewErrorModel(b *testing.B) {
	rng := rand.New(rand.NewPCG(50000, 5000))
	var obs []Observation
	for i := 0; i < 50000; i++ {
		predicted := time.Duration(5+rng.IntN(600)) * time.Minute
		obs = append(obs, Observation{Predicted: predicted, Ran: time.Duration(float64(predicted) * math.Exp(rng.NormFloat64())), Finished: true,
			Began: -time.Duration(rng.IntN(14*24*3600)) * time.Second})
	}
	for i := 0; i < 5000; i++ {
		ran := time.Duration(1+rng.IntN(600*60)) * time.Second
		obs = append(obs, Observation{Predicted: time.Duration(5+rng.IntN(600)) * time.Minute, Ran: ran, Began: -ran})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if m := NewErrorModel(obs); m.empty() {
			b.Fatal("no model")
		}
	}
}
