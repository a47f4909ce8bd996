package fidelity_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/trace"
)

// scenario is one seeded workload for the differential test: a cluster and
// the jobs submitted to it, plus the profile both sides run under.
type scenario struct {
	seed    uint64
	inv     trace.Inventory
	jobs    []trace.Job
	profile string
	// table is the predictor table published with the profile and
	// predicted from in the replay; "" for none.
	table string
	// dra publishes the nodes' GPUs through DRA on the live side, and the
	// jobs it picks ask for them through claim templates (the others as
	// nvidia.com/gpu, served by DRA). The simulator replays them all
	// alike: a GPU is a GPU however it is asked for.
	dra func(trace.Job) bool
	// gangAPI declares the gangs on the live side: scheduler-plugins
	// PodGroups ("", podgroup.APIPodGroup) or Workload API PodGroups. The
	// simulator replays a gang alike either way.
	gangAPI podgroup.API
}

// Models of the two node kinds: 8-GPU H100 hosts and 4-GPU A100 hosts.
const (
	modelBig   = "NVIDIA-H100-80GB-HBM3"
	modelSmall = "NVIDIA-A100-SXM4-40GB"
)

// Queues and their limits. Together they allow more than the cluster's 384
// GPUs, so each queue can be held back by its own limit while the cluster
// still fills up and high-priority pods have to preempt.
var queueLimits = []struct {
	name        string
	gpus, gangs int
}{
	{"team-a", 192, 0},
	{"team-b", 160, 0},
	{"team-c", 128, 3},
}

// The profile under test. Fragmentation is left out: the live plugin
// measures it against the pods it has seen so far, the replay against the
// whole trace, so the two would differ by design, not by error. The gang
// timeout is short because live it is wall time: a gang held at Permit
// costs the step that long.
func differentialProfile() string {
	doc := "apiVersion: schedloop.io/v1\nkind: SchedulingProfile\nname: differential\n" +
		"weights: {topology: 10, bestfit: 2, packing: 1}\ngangTimeoutSeconds: 10\nqueues:\n"
	for _, q := range queueLimits {
		doc += fmt.Sprintf("  %s: {maxGPUs: %d, maxRunningGangs: %d}\n", q.name, q.gpus, q.gangs)
	}
	return doc
}

// mix is what generate draws: how many nodes carry no topology label, and
// the shares of job kinds.
type mix struct {
	unlabelled int
	lone       float64 // lone pods of 1, 2, 4 or 8 whole GPUs
	shares     float64 // lone pods asking for a share of one GPU
	// the rest are gangs of 2..16 members
	high  float64 // jobs at highPriority; the others at 0
	model float64 // jobs restricted to one GPU model
}

// defaultMix is the workload: some unlabelled nodes, GPU shares,
// gangs, two priorities, model constraints.
var defaultMix = mix{unlabelled: 8, lone: 0.45, shares: 0.15, high: 0.2, model: 0.15}

const highPriority = 100

// generate builds the scenario of seed: 56 nodes (40 of 8 GPUs, 16 of 4, in
// 2 spines x 2 racks x 2 NVLink domains, 8 of them without topology labels)
// and jobs (lone pods, GPU shares, gangs of 2 to 16, three queues, two
// priorities) arriving about every 40 s and running 5 to 40 minutes, drawn
// as m says. The same seed and mix give the same scenario.
func generate(seed uint64, jobs int, m mix) scenario {
	rng := rand.New(rand.NewPCG(seed, 0xd1ff))
	const hosts, small = 56, 16
	models := make([]string, hosts)
	for i := range models {
		models[i] = modelBig
		if i < small {
			models[i] = modelSmall
		}
	}
	rng.Shuffle(len(models), func(i, j int) { models[i], models[j] = models[j], models[i] })
	var labelled, bare []trace.Node
	skip := rng.Perm(hosts)[:m.unlabelled]
	for i := range hosts {
		n := trace.Node{Name: fmt.Sprintf("n%02d", i), GPUs: 8, GPUModel: models[i], CPUMilli: 128000, MemoryMiB: 1 << 20}
		if n.GPUModel == modelSmall {
			n.GPUs = 4
		}
		if slices.Contains(skip, i) {
			bare = append(bare, n)
		} else {
			labelled = append(labelled, n)
		}
	}
	if err := trace.AssignTopology(labelled, "dc", trace.DefaultLevels, []int{2, 2, 2}); err != nil {
		panic(err) // fixed fanout: cannot fail
	}
	nodes := append(labelled, bare...)
	slices.SortFunc(nodes, func(a, b trace.Node) int { return strings.Compare(a.Name, b.Name) })

	out := make([]trace.Job, jobs)
	var at time.Duration
	for i := range out {
		at += time.Duration(rng.ExpFloat64() * float64(40*time.Second)).Round(time.Millisecond)
		j := trace.Job{
			Name: fmt.Sprintf("job-%03d", i), Arrival: at, Members: 1,
			Duration:  time.Duration(5+rng.IntN(36)) * time.Minute,
			Queue:     queueLimits[rng.IntN(len(queueLimits))].name,
			MemoryMiB: 4096, Util: 0.8, Outcome: trace.Succeeded,
		}
		switch r := rng.Float64(); {
		case r < m.lone:
			j.GPUs = []int{1, 2, 4, 8}[rng.IntN(4)]
		case r < m.lone+m.shares:
			j.GPUs, j.GPUMilli = 1, []int{250, 500}[rng.IntN(2)]
		default:
			j.Members = []int{2, 3, 4, 6, 8, 12, 16}[rng.IntN(7)]
			j.GPUs = []int{1, 2, 4, 8}[rng.IntN(4)]
			for j.Members*j.GPUs > 48 {
				j.GPUs /= 2
			}
		}
		j.CPUMilli = int64(max(j.GPUs, 1)) * 1000
		if rng.Float64() < m.high {
			j.Priority = highPriority
		}
		if rng.Float64() < m.model {
			j.GPUModels = []string{[]string{modelBig, modelSmall}[rng.IntN(2)]}
		}
		out[i] = j
	}
	return scenario{seed: seed, inv: trace.Inventory{Levels: trace.DefaultLevels, Nodes: nodes}, jobs: out, profile: differentialProfile()}
}
