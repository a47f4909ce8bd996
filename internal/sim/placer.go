package sim

import (
	"github.com/schedloop/schedloop/internal/scoring"
)

// placer places pods on the cluster through internal/scoring and remembers
// scores between decisions. Scoring is a pure function of a node's state and
// the request, so a node's score for a request shape stays valid until that
// node changes: every change goes through allocate/release, which bump the
// node's generation and so invalidate its cached scores.
type placer struct {
	nodes  []*scoring.Node
	depth  int
	scorer scoring.Scorer
	random bool
	seed   uint64
	// maxLevel is the topology level gangs must stay within (-1: none).
	maxLevel int
	// toFind is how many feasible nodes a lone pod's decision considers
	// (scoring.NodesToFind), and next where the walk for them starts, as
	// kube-scheduler's nextStartNodeIndex.
	toFind, next int

	gen    []uint32
	shapes map[string]int
	cache  [][]cached // [shape][node]
	// frag is each node's Fragmentation under the scorer's workload, kept
	// current on every change, and fragSum their total.
	frag    []float64
	fragSum float64
	// admit, while set, limits the next placements to the nodes it admits
	// (a reservation's backfill rule).
	admit func(i int) bool

	// idle is each node's idle device count and idleNodes[k] how many
	// nodes have exactly k idle devices, kept on every change, so a
	// request for more whole GPUs than any node (or, for a gang, the
	// whole cluster) has idle fails without a walk over every node. On a
	// full 10,000-GPU cluster most attempts are such failures, and the
	// walks were nine tenths of a forward replay's time (BenchmarkForecastAllPending).
	idle      []int
	idleNodes []int
}

type cached struct {
	gen     uint32 // node generation + 1; 0 is empty
	score   float64
	devices []int
}

// newPlacer places on c's nodes. percentage is the scheduler profile's
// percentageOfNodesToScore (0: kube-scheduler's adaptive default, 100: every
// node); the random policy always draws from every node.
func newPlacer(c *Cluster, s scoring.Scorer, random bool, seed uint64, maxLevel, percentage int) *placer {
	p := &placer{nodes: c.Nodes, depth: c.Depth, scorer: s, random: random, seed: seed, maxLevel: maxLevel,
		toFind: scoring.NodesToFind(len(c.Nodes), percentage),
		gen:    make([]uint32, len(c.Nodes)), shapes: map[string]int{}, frag: make([]float64, len(c.Nodes))}
	if len(s.Workload) > 0 {
		for i, n := range c.Nodes {
			p.frag[i] = scoring.Fragmentation(n, s.Workload)
			p.fragSum += p.frag[i]
		}
	}
	p.idle = make([]int, len(c.Nodes))
	for i, n := range c.Nodes {
		p.idle[i] = n.IdleGPUs()
		for len(p.idleNodes) <= n.GPUCap() {
			p.idleNodes = append(p.idleNodes, 0)
		}
		p.idleNodes[p.idle[i]]++
	}
	return p
}

// skipWalks turns the idle-count shortcut off, for the test that holds it
// to the walks' answers.
var skipWalks = true

// cannotFit reports that members pods of r, each asking for whole GPUs,
// cannot all be placed now whatever the nodes' other resources: fewer
// pods of r fit into the idle devices of the whole cluster. Shares and
// requests without GPUs are left to the walk.
func (p *placer) cannotFit(r scoring.Request, members int) bool {
	if !skipWalks || r.GPUs <= 0 || r.Shared() {
		return false
	}
	fit := 0
	for k := len(p.idleNodes) - 1; k >= r.GPUs; k-- {
		fit += p.idleNodes[k] * (k / r.GPUs)
		if fit >= members {
			return false
		}
	}
	return true
}

// shape interns a request so cached scores can be found by index.
func (p *placer) shape(key string) int {
	id, ok := p.shapes[key]
	if !ok {
		id = len(p.cache)
		p.shapes[key] = id
		p.cache = append(p.cache, nil)
	}
	return id
}

// pick chooses a node for one pod (pod identifies it to the random policy).
func (p *placer) pick(r scoring.Request, shape int, pod uint64) (int, []int) {
	if p.random {
		return scoring.SelectNode(p.nodes, r, func(i int, n *scoring.Node) (float64, []int) {
			if p.admit != nil && !p.admit(i) {
				return -1, nil
			}
			// 53 bits of the rank are exact in a float64.
			return float64(scoring.RandomRank(p.seed, pod, n.Name) >> 11), scoring.RandomDevices(n, r, p.seed, pod)
		})
	}
	if p.cache[shape] == nil {
		p.cache[shape] = make([]cached, len(p.nodes))
	}
	row := p.cache[shape]
	score := func(i int, n *scoring.Node) (float64, []int) {
		if p.admit != nil && !p.admit(i) {
			return -1, nil
		}
		if e := row[i]; e.gen == p.gen[i]+1 {
			return e.score, e.devices
		}
		v, d := p.scorer.Score(n, r)
		row[i] = cached{gen: p.gen[i] + 1, score: v, devices: d}
		return v, d
	}
	best, devices, processed := scoring.SelectNodeSampled(p.nodes, r, p.next, p.toFind, score)
	p.next = (p.next + processed) % len(p.nodes)
	return best, devices
}

// placeOne places a lone pod; ok is false when it fits nowhere.
func (p *placer) placeOne(r scoring.Request, shape int, pod uint64) (scoring.Allocation, int, bool) {
	if p.cannotFit(r, 1) {
		// The walk would have visited every node and moved the rotating
		// start by a whole turn: nothing to update.
		return scoring.Allocation{}, -1, false
	}
	i, devices := p.pick(r, shape, pod)
	if i < 0 {
		return scoring.Allocation{}, -1, false
	}
	a, err := p.nodes[i].Allocate(r, devices)
	if err != nil {
		// Scoring chose devices that cannot serve the request: a bug in
		// scoring, surfaced rather than hidden.
		panic("sim: " + err.Error())
	}
	p.changed(i)
	return a, i, true
}

// placeOn places a lone pod on node i, choosing its devices there as
// pick would (a preemptor goes to the node its victims left, as the
// scheduler binds a pod to its nominated node when it fits there); ok is
// false when it does not fit.
func (p *placer) placeOn(i int, r scoring.Request, pod uint64) (scoring.Allocation, bool) {
	n := p.nodes[i]
	if n.Fit(r) != scoring.Fits {
		return scoring.Allocation{}, false
	}
	var devices []int
	if p.random {
		devices = scoring.RandomDevices(n, r, p.seed, pod)
	} else {
		_, devices = p.scorer.Score(n, r)
	}
	a, err := n.Allocate(r, devices)
	if err != nil {
		panic("sim: " + err.Error())
	}
	p.changed(i)
	return a, true
}

// placeGang places members pods all-or-nothing (scoring.PlaceGang).
func (p *placer) placeGang(r scoring.Request, members int, pod uint64) ([]scoring.Allocation, []int, bool) {
	if p.cannotFit(r, members) {
		return nil, nil, false
	}
	if p.random {
		var allocs []scoring.Allocation
		var idx []int
		for m := 0; m < members; m++ {
			a, i, ok := p.placeOne(r, -1, pod*1024+uint64(m))
			if !ok {
				for k := len(allocs) - 1; k >= 0; k-- {
					p.release(idx[k], allocs[k])
				}
				return nil, nil, false
			}
			allocs, idx = append(allocs, a), append(idx, i)
		}
		return allocs, idx, true
	}
	nodes, ids := p.nodes, []int(nil)
	if p.admit != nil {
		nodes = nil
		for i, n := range p.nodes {
			if p.admit(i) {
				nodes, ids = append(nodes, n), append(ids, i)
			}
		}
	}
	allocs, idx, ok := scoring.PlaceGang(nodes, r, members, p.depth, p.maxLevel, p.scorer)
	for k, i := range idx {
		if ids != nil {
			i = ids[i]
			idx[k] = i
		}
		p.changed(i)
	}
	return allocs, idx, ok
}

// fitsSomewhere reports whether one pod shaped r fits a node the placer
// may use now: a gang's first member would find a node.
func (p *placer) fitsSomewhere(r scoring.Request) bool {
	if p.cannotFit(r, 1) {
		return false
	}
	for i, n := range p.nodes {
		if (p.admit == nil || p.admit(i)) && n.Fit(r) == scoring.Fits {
			return true
		}
	}
	return false
}

func (p *placer) release(i int, a scoring.Allocation) {
	p.nodes[i].Release(a)
	p.changed(i)
}

func (p *placer) changed(i int) {
	p.gen[i]++
	idle := p.nodes[i].IdleGPUs()
	p.idleNodes[p.idle[i]]--
	p.idleNodes[idle]++
	p.idle[i] = idle
	if len(p.scorer.Workload) > 0 {
		f := scoring.Fragmentation(p.nodes[i], p.scorer.Workload)
		p.fragSum += f - p.frag[i]
		p.frag[i] = f
	}
}
