package scoring

import "time"

// PlaceGang places members pods shaped r all-or-nothing, the rule the
// scheduler's gang plugins enforce at Permit: it plans the gang's topology
// domain (PlanGang; maxLevel >= 0 makes the domain a requirement), then
// places members one at a time on the node SelectNode prefers under s with
// the plan set (inside the domain when ConfinedToPlan), allocating as it
// goes. If any member cannot be placed it releases what it took and returns
// ok == false, leaving nodes as they were.
// A lone pod (members == 1) gets no plan.
func PlaceGang(nodes []*Node, r Request, members, depth, maxLevel int, s Scorer) (allocs []Allocation, nodeIdx []int, ok bool) {
	if members > 1 {
		plan, ok := PlanGang(nodes, r, members, depth, maxLevel)
		if !ok {
			return nil, nil, false
		}
		s.Plan = &plan
	}
	confined := ConfinedToPlan(s.Plan, s.Weights, maxLevel >= 0)
	score := func(_ int, n *Node) (float64, []int) {
		if confined && !s.Plan.Contains(n) {
			return -1, nil
		}
		return s.Score(n, r)
	}
	for m := 0; m < members; m++ {
		i, devices := SelectNode(nodes, r, score)
		if i < 0 {
			ReleaseAll(nodes, allocs, nodeIdx)
			return nil, nil, false
		}
		a, err := nodes[i].Allocate(r, devices)
		if err != nil {
			ReleaseAll(nodes, allocs, nodeIdx)
			return nil, nil, false
		}
		allocs = append(allocs, a)
		nodeIdx = append(nodeIdx, i)
	}
	return allocs, nodeIdx, true
}

// ConfinedToPlan reports whether a gang's members may only go to nodes
// inside its plan's domain: when a level is required, and whenever the
// topology term counts at all. PlanGang chose the domain because it holds
// the whole gang, so confining members loses no placement the plan promised,
// and it keeps a gang together even where the scheduler scores only a
// sample of the cluster's nodes, which may not include the domain.
func ConfinedToPlan(p *GangPlan, w Weights, required bool) bool {
	return p != nil && p.Level >= 0 && (required || w[TermTopology] > 0)
}

// ReleaseAll undoes allocations made on nodes[nodeIdx[k]], last first.
func ReleaseAll(nodes []*Node, allocs []Allocation, nodeIdx []int) {
	for k := len(allocs) - 1; k >= 0; k-- {
		nodes[nodeIdx[k]].Release(allocs[k])
	}
}

// DefaultGangBackoff is how long a gang released part-placed is refused
// (the gang plugin's backoffSeconds default), live and replayed.
const DefaultGangBackoff = 2 * time.Second

// GangBacksOff reports whether a gang that could not be placed whole
// backs off. No gang holds GPUs part-placed: its members are placed one at
// a time once admission lets the gang start (admitted: GangFit finds room
// for every member), and the first member that finds no node releases the
// members placed before it, so the gang backs off when admitted and at
// least its first member found a node (placedFirst). A gang refused before
// any member was placed holds and releases nothing; it is tried again as
// any waiting job is, when something is released.
func GangBacksOff(admitted, placedFirst bool) bool { return admitted && placedFirst }

// GangRetryAt is when a gang released at released (any monotone unit of
// nanoseconds) may be tried again after backing off for backoff: until
// then its members are refused. Whether it is tried then depends on what
// wakes it, as for any waiting job.
func GangRetryAt(released int64, backoff time.Duration) int64 { return released + int64(backoff) }
