package scoring

// kube-scheduler does not score every feasible node of a large cluster: it
// filters nodes from a rotating start until it has found enough feasible
// ones, then scores only those (percentageOfNodesToScore). The simulator
// samples by the same rule so a replay of a large cluster sees the
// candidates the live scheduler sees.

// Constants of kube-scheduler's numFeasibleNodesToFind.
const (
	minNodesToFind          = 100
	minPercentageToFind     = 5
	adaptivePercentageStart = 50
	adaptiveNodesPerPercent = 125
)

// NodesToFind is how many feasible nodes kube-scheduler looks for before it
// stops filtering, for a cluster of numNodes and a profile's
// percentageOfNodesToScore (0: the adaptive default, 50% less one point per
// 125 nodes, at least 5%). Clusters under 100 nodes, and any answer under
// 100, are searched whole.
func NodesToFind(numNodes, percentage int) int {
	if numNodes < minNodesToFind {
		return numNodes
	}
	if percentage <= 0 {
		percentage = max(adaptivePercentageStart-numNodes/adaptiveNodesPerPercent, minPercentageToFind)
	}
	n := numNodes * min(percentage, 100) / 100
	return max(n, minNodesToFind)
}

// SelectNodeSampled is SelectNode over the first want feasible nodes found
// walking nodes from start (wrapping around), as kube-scheduler's filter
// loop finds them. processed is how many nodes the walk examined: the
// scheduler advances its next start by that much.
func SelectNodeSampled(nodes []*Node, r Request, start, want int, score ScoreFunc) (best int, devices []int, processed int) {
	best = -1
	var bestScore float64
	found := 0
	for k := 0; k < len(nodes) && found < want; k++ {
		i := (start + k) % len(nodes)
		processed++
		n := nodes[i]
		if n.Fit(r) != Fits {
			continue
		}
		v, d := score(i, n)
		if v < 0 {
			continue
		}
		found++
		if best < 0 || Better(v, n.Name, bestScore, nodes[best].Name) {
			best, bestScore, devices = i, v, d
		}
	}
	return best, devices, processed
}
