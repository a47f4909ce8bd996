package scoring

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"
)

// Node selection is shared by the scheduler plugins and the simulator, so
// both choose the same node: the highest Score (before the framework's
// rounding to 0..100), ties going to the node whose name sorts first — the
// rule of Best, which the scheduler plugin folds into its integer scores. A
// name-based rule does not depend on the order a caller lists nodes in, so
// the live scheduler and a replay agree without sharing lists.

// Better reports whether a node scoring aScore named aName should be chosen
// over one scoring bScore named bName: higher score first, then lower name.
func Better(aScore float64, aName string, bScore float64, bName string) bool {
	if aScore != bScore {
		return aScore > bScore
	}
	return aName < bName
}

// ScoreFunc scores the feasible node nodes[i] for a request and names the
// devices the placement would use; a negative score excludes the node.
type ScoreFunc func(i int, n *Node) (float64, []int)

// SelectNode filters nodes with Fit, scores the feasible ones and returns
// the index of the best by Better, with its devices; -1 when none fits.
func SelectNode(nodes []*Node, r Request, score ScoreFunc) (best int, devices []int) {
	best, devices, _ = SelectNodeSampled(nodes, r, 0, len(nodes), score)
	return best, devices
}

// NodeScoreDevices is NodeScore with the devices Score chose.
func (s *Scorer) NodeScoreDevices(n *Node, r Request) (int64, []int) {
	v, d := s.Score(n, r)
	return int64(math.Round(v)), d
}

// Policy names a whole placement policy of the FGD paper's comparison
// ("Beware of Fragmentation", Weng et al., USENIX ATC 2023): each is one
// score term at full weight, except Random.
type Policy string

const (
	PolicyFGD     Policy = "fgd"
	PolicyBestFit Policy = "bestfit"
	PolicyPacking Policy = "packing"
	PolicyDotProd Policy = "dotprod"
	// PolicyRandom places each pod on a uniformly random feasible node,
	// drawn from a seeded hash (RandomRank) so replays repeat.
	PolicyRandom Policy = "random"
)

// Policies lists the policies in the order the paper's tables use.
var Policies = []Policy{PolicyFGD, PolicyBestFit, PolicyPacking, PolicyDotProd, PolicyRandom}

// ParsePolicy checks a policy name.
func ParsePolicy(s string) (Policy, error) {
	p, err := parseName(s, Policies)
	if err != nil {
		return "", fmt.Errorf("policy: %w", err)
	}
	return p, nil
}

// Weights is the policy's score terms; nil for PolicyRandom.
func (p Policy) Weights() Weights {
	switch p {
	case PolicyFGD:
		return Weights{TermFragmentation: 1}
	case PolicyBestFit:
		return Weights{TermBestFit: 1}
	case PolicyPacking:
		return Weights{TermPacking: 1}
	case PolicyDotProd:
		return Weights{TermDotProduct: 1}
	}
	return nil
}

// RandomRank is a seeded pseudo-random rank of node for pod: choosing the
// feasible node of highest rank picks uniformly among them, and the same
// seed, pod and node always give the same rank.
func RandomRank(seed, pod uint64, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	return mix64(seed ^ mix64(pod^mix64(h.Sum64())))
}

// RandomDevices picks devices for r on n at random (seeded like
// RandomRank): any device with room for a shared request; the
// lowest-numbered idle ones for whole devices, which are all alike.
func RandomDevices(n *Node, r Request, seed, pod uint64) []int {
	if !r.Shared() {
		return n.IdleDevices(r.GPUs)
	}
	best, bestRank := -1, uint64(0)
	for d, f := range n.GPUFree {
		if f < r.GPUMilli {
			continue
		}
		if rank := mix64(seed ^ mix64(pod^uint64(d+1))); best < 0 || rank > bestRank {
			best, bestRank = d, rank
		}
	}
	if best < 0 {
		return nil
	}
	return []int{best}
}

// mix64 is the splitmix64 finaliser.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// parseName finds s among the names of all, or says which names there are.
func parseName[T ~string](s string, all []T) (T, error) {
	for _, p := range all {
		if string(p) == s {
			return p, nil
		}
	}
	names := make([]string, len(all))
	for i, p := range all {
		names[i] = string(p)
	}
	return "", fmt.Errorf("%q is not one of %s", s, strings.Join(names, ", "))
}
