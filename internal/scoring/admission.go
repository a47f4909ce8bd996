package scoring

import "strings"

// Gang admission: a gang may start reserving only when its outstanding
// members fit in what is free after every gang already reserving has been
// given its own outstanding members. Two gangs that cannot both fit then
// never hold GPUs at the same time: the later one waits, holding nothing.

// GangDemand is what a gang that is already reserving still needs.
type GangDemand struct {
	Request Request
	Members int
}

// Reserve takes demands from nodes in order, each member on the first node
// (in the given order) that fits it, the way a gang's members would land
// when nothing else competes. It changes nodes in place and reports how many
// members found no room.
func Reserve(nodes []*Node, demands []GangDemand) (short int) {
	for _, d := range demands {
		left := d.Members
		for _, n := range nodes {
			for left > 0 && n.Fit(d.Request) == Fits {
				if _, err := n.Allocate(d.Request, BestFitDevices(n, d.Request)); err != nil {
					break
				}
				left--
			}
			if left == 0 {
				break
			}
		}
		short += left
	}
	return short
}

// CloneNodes deep-copies nodes for a trial placement.
func CloneNodes(nodes []*Node) []*Node {
	out := make([]*Node, len(nodes))
	for i, n := range nodes {
		out[i] = n.Clone()
	}
	return out
}

// GangFit counts how many of members pods shaped like r fit on nodes once
// the demands of gangs already reserving are set aside (nodes is not
// changed). A gang is admitted when GangFit reaches its outstanding members.
func GangFit(nodes []*Node, reserving []GangDemand, r Request, members int) int {
	if len(reserving) > 0 {
		nodes = CloneNodes(nodes)
		Reserve(nodes, reserving)
	}
	total := 0
	for _, n := range nodes {
		total += Capacity(n, r)
		if total >= members {
			return members
		}
	}
	return total
}

// GangShortOfGPUs reports, for a gang GangFit found short, whether GPUs are
// what it lacks: its outstanding members do not fit even with their CPU and
// memory set aside. Otherwise CPU or memory is short. A refusal that says
// which lets the wait be filed as the capacity it waits for rather than as
// a gang missing members.
func GangShortOfGPUs(nodes []*Node, reserving []GangDemand, r Request, members int) bool {
	gpuOnly := r
	gpuOnly.CPUMilli, gpuOnly.MemoryMiB = 0, 0
	return GangFit(nodes, reserving, gpuOnly, members) < members
}

// LargestDomainGPUs is the most idle GPUs any single domain at level holds
// (level indexes the depth topology levels; depth means one host), for
// reasons that say how far a gang is from fitting.
func LargestDomainGPUs(nodes []*Node, level, depth int) int {
	free := map[string]int{}
	best := 0
	for _, n := range nodes {
		if level < 0 || !inDomainAt(n, min(level, depth), depth) {
			continue
		}
		k := domainKey(n, min(level, depth), depth)
		free[k] += n.IdleGPUs()
		best = max(best, free[k])
	}
	return best
}

// Best picks the winning node among scored candidates: the highest score,
// ties going to the lexicographically smallest name. kube-scheduler itself
// picks at random among equal top scores; the scheduler plugins fold this
// rule into their normalised scores so the live scheduler and the simulator
// choose the same node. It returns -1 for no candidates.
func Best(names []string, scores []float64) int {
	best := -1
	for i := range names {
		if best < 0 || scores[i] > scores[best] || scores[i] == scores[best] && strings.Compare(names[i], names[best]) < 0 {
			best = i
		}
	}
	return best
}
