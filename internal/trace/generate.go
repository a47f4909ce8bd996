package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// GenConfig describes a synthetic workload. Zero fields take the defaults
// noted beside them.
type GenConfig struct {
	Seed             uint64
	Jobs             int           // number of jobs (default 100)
	MeanInterarrival time.Duration // mean gap between arrivals, exponential (default 30s)
	MinDuration      time.Duration // run time is log-uniform in [Min, Max] (default 1m..1h)
	MaxDuration      time.Duration
	GangSizes        []int    // drawn uniformly (default 1,1,1,2,4)
	GPUsPerMember    []int    // drawn uniformly (default 1,2,4,8)
	Queues           []string // drawn uniformly (default "default")
	Priorities       []int32  // drawn uniformly (default 0)
	IdleShare        float64  // share of jobs that hold GPUs but stay idle (Util 0)
	FailShare        float64  // share of jobs whose pods fail
}

// Generate makes a seeded synthetic workload: the same config gives the same
// jobs, in arrival order, named gen-NNNN.
func Generate(c GenConfig) []Job {
	if c.Jobs == 0 {
		c.Jobs = 100
	}
	if c.MeanInterarrival == 0 {
		c.MeanInterarrival = 30 * time.Second
	}
	if c.MinDuration == 0 {
		c.MinDuration = time.Minute
	}
	if c.MaxDuration < c.MinDuration {
		c.MaxDuration = max(time.Hour, c.MinDuration)
	}
	gangs := orDefault(c.GangSizes, []int{1, 1, 1, 2, 4})
	gpus := orDefault(c.GPUsPerMember, []int{1, 2, 4, 8})
	queues := orDefault(c.Queues, []string{"default"})
	prios := orDefault(c.Priorities, []int32{0})
	rng := rand.New(rand.NewPCG(c.Seed, 0x5c4ed100))
	jobs := make([]Job, c.Jobs)
	var at time.Duration
	lo, hi := math.Log(float64(c.MinDuration)), math.Log(float64(c.MaxDuration))
	for i := range jobs {
		j := Job{
			Name:     fmt.Sprintf("gen-%04d", i),
			Arrival:  at,
			Duration: time.Duration(math.Exp(lo + rng.Float64()*(hi-lo))).Round(time.Second),
			Members:  gangs[rng.IntN(len(gangs))],
			GPUs:     gpus[rng.IntN(len(gpus))],
			Queue:    queues[rng.IntN(len(queues))],
			Priority: prios[rng.IntN(len(prios))],
			Util:     0.5 + 0.5*rng.Float64(),
			Outcome:  Succeeded,
		}
		if rng.Float64() < c.IdleShare {
			j.Util = 0
		}
		if rng.Float64() < c.FailShare {
			j.Outcome = Failed
		}
		jobs[i] = j
		at += time.Duration(rng.ExpFloat64() * float64(c.MeanInterarrival)).Round(time.Millisecond)
	}
	return jobs
}

func orDefault[T any](v, def []T) []T {
	if len(v) == 0 {
		return def
	}
	return v
}
