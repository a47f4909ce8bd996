package scoring

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
