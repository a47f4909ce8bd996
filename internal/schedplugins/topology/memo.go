package topology

import (
	"strings"
	"sync"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/schedloop/schedloop/internal/schedplugins/nodeview"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/scoring"
)

// scoreInputs is everything besides the node that a raw score depends on.
// scoring.Scorer.Score is a pure function of the node's view and these, so
// equal inputs on a node whose nodeview.Version has not moved give the
// same score. The profile, workload and plan are compared by identity: each
// is replaced, never changed in place, and an entry holding the pointer
// keeps its address from being reused.
type scoreInputs struct {
	profile  *profilewatch.Active
	workload *workloadSnapshot
	plan     *scoring.GangPlan

	cpuMilli, memoryMiB int64
	gpus, gpuMilli      int
	models              string
}

func inputsFor(a *profilewatch.Active, w *workloadSnapshot, plan *scoring.GangPlan, r scoring.Request) scoreInputs {
	return scoreInputs{profile: a, workload: w, plan: plan, cpuMilli: r.CPUMilli, memoryMiB: r.MemoryMiB,
		gpus: r.GPUs, gpuMilli: r.GPUMilli, models: strings.Join(r.GPUModels, "\x00")}
}

// memoWays is how many request shapes each node remembers. A workload
// alternating a few shapes (a gang's members, then single pods of another
// shape) keeps hitting; more ways would mostly hold stale gangs' plans.
const memoWays = 4

type memoEntry struct {
	in    scoreInputs
	score float64
}

type nodeScores struct {
	version nodeview.Version
	// seen is the last call that listed the node, for forgetting removed nodes.
	seen       uint64
	entries    [memoWays]memoEntry
	used, next int
}

// scoreMemo remembers raw scores per node between scheduling cycles. A
// binding changes one node's NodeInfo, so for the next pod of the same shape
// every other node's score is a lookup rather than a fragmentation model
// over the node's devices: at a thousand nodes that is most of PreScore.
type scoreMemo struct {
	mu     sync.Mutex
	byName map[string]*nodeScores
	calls  uint64
}

// memoSweepEvery is how many calls pass between sweeps for removed nodes;
// a node unlisted for that long is gone or full, and either way cheap to
// recompute.
const memoSweepEvery = 1024

func newScoreMemo() *scoreMemo { return &scoreMemo{byName: map[string]*nodeScores{}} }

// scores fills raw[i] for each of nodes, computing only what is not
// remembered for the node's current version. compute returns the score
// of one node (0 when the request does not fit it).
func (m *scoreMemo) scores(nodes []fwk.NodeInfo, in scoreInputs, names []string, raw []float64, compute func(fwk.NodeInfo) float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	for i, ni := range nodes {
		name, version := ni.Node().Name, nodeview.VersionOf(ni)
		names[i] = name
		ns := m.byName[name]
		if ns == nil {
			ns = &nodeScores{version: version}
			m.byName[name] = ns
		} else if ns.version != version {
			*ns = nodeScores{version: version}
		}
		ns.seen = m.calls
		if v, ok := ns.lookup(in); ok {
			raw[i] = v
			continue
		}
		v := compute(ni)
		ns.entries[ns.next] = memoEntry{in: in, score: v}
		ns.next = (ns.next + 1) % memoWays
		ns.used = min(ns.used+1, memoWays)
		raw[i] = v
	}
	if m.calls%memoSweepEvery == 0 {
		for name, ns := range m.byName {
			if m.calls-ns.seen >= memoSweepEvery {
				delete(m.byName, name)
			}
		}
	}
}

func (ns *nodeScores) lookup(in scoreInputs) (float64, bool) {
	for i := range ns.used {
		if ns.entries[i].in == in {
			return ns.entries[i].score, true
		}
	}
	return 0, false
}
