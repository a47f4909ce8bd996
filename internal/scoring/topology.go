package scoring

import (
	"slices"
	"strings"
)

// Topology is described, as in Kueue's topology-aware scheduling, by an
// ordered list of node-label keys from the outermost level (spine) to the
// innermost (NVLink domain); each Node carries its value at each level in
// Domains. The host is an implicit level below the last key.

// GangPlan is where a gang should land: the innermost domain that can hold
// all its remaining members.
type GangPlan struct {
	// Level indexes the Levels; len(Levels) means a single host and -1 the
	// whole cluster (no level could hold the gang).
	Level int
	// Path is the domain's values from the outermost level down to Level
	// (for the host level, the node name is appended).
	Path []string
	// Spare is the domain's capacity left after the gang, in members.
	Spare int
}

// Capacity counts how many more pods shaped like r fit on n.
func Capacity(n *Node, r Request) int {
	if r.asksGPU() && len(r.GPUModels) > 0 && !slices.Contains(r.GPUModels, n.GPUModel) {
		return 0
	}
	c := int(^uint(0) >> 1)
	if r.CPUMilli > 0 {
		c = min(c, int(n.CPUMilliFree/r.CPUMilli))
	}
	if r.MemoryMiB > 0 {
		c = min(c, int(n.MemoryMiBFree/r.MemoryMiB))
	}
	switch {
	case r.Shared():
		slots := 0
		for _, f := range n.GPUFree {
			slots += f / r.GPUMilli
		}
		c = min(c, slots)
	case r.GPUs > 0:
		c = min(c, n.IdleGPUs()/r.GPUs)
	}
	for p, k := range r.MIG {
		if p != MIGAnyProfile && k > 0 {
			c = min(c, n.MIGFree[p]/k)
		}
	}
	return max(c, 0)
}

// NodeDomains is a node's value at each topology level, outermost first,
// read with label (a node's label lookup) from the level keys. A node
// missing a level's label, or carrying it empty, belongs to no domain at
// that level or any level below it: its Domains stop there. It is still a
// host of its own, so a gang may be planned onto it at the host level.
// The scheduler plugins and the simulator both build Domains with it.
func NodeDomains(levels []string, label func(key string) string) []string {
	domains := make([]string, 0, len(levels))
	for _, key := range levels {
		v := label(key)
		if v == "" {
			break
		}
		domains = append(domains, v)
	}
	return domains
}

// inDomainAt reports whether n has a domain at level (of depth levels): a
// node missing a label has none at or below that level, but every node is
// its own host (level == depth).
func inDomainAt(n *Node, level, depth int) bool {
	return level >= depth || len(n.Domains) > level
}

// domainKey is the node's path down to level, joined; level == depth means
// the host itself (the node's domains, as far as it has them, then its name).
func domainKey(n *Node, level, depth int) string {
	if level >= depth {
		return strings.Join(append(append([]string{}, n.Domains[:min(depth, len(n.Domains))]...), n.Name), "\x00")
	}
	return strings.Join(n.Domains[:level+1], "\x00")
}

// PlanGang picks the innermost topology domain that can hold members more
// pods shaped like r, considering levels from the host up to maxLevel
// (maxLevel = -1 allows the whole cluster; a required level passes its
// index). depth is the number of topology levels. Among feasible domains at
// the chosen level it takes the tightest (least spare capacity) so large
// domains stay whole for larger gangs; ties go to the smallest path. ok is
// false when no allowed domain can hold the gang.
func PlanGang(nodes []*Node, r Request, members, depth, maxLevel int) (plan GangPlan, ok bool) {
	if members <= 0 {
		return GangPlan{Level: -1}, true
	}
	for level := depth; level >= max(maxLevel, 0); level-- {
		capacity := map[string]int{}
		for _, n := range nodes {
			if !inDomainAt(n, level, depth) {
				continue
			}
			if c := Capacity(n, r); c > 0 {
				capacity[domainKey(n, level, depth)] += c
			}
		}
		bestKey, bestSpare := "", -1
		for key, c := range capacity {
			if c < members {
				continue
			}
			spare := c - members
			if bestSpare < 0 || spare < bestSpare || spare == bestSpare && key < bestKey {
				bestKey, bestSpare = key, spare
			}
		}
		if bestSpare >= 0 {
			return GangPlan{Level: level, Path: strings.Split(bestKey, "\x00"), Spare: bestSpare}, true
		}
	}
	if maxLevel >= 0 {
		return GangPlan{}, false
	}
	total := 0
	for _, n := range nodes {
		total += Capacity(n, r)
	}
	if total < members {
		return GangPlan{}, false
	}
	return GangPlan{Level: -1, Spare: total - members}, true
}

// Contains reports whether n lies inside the plan's domain.
func (p *GangPlan) Contains(n *Node) bool {
	if p == nil || p.Level < 0 {
		return true
	}
	return p.sharedLevels(n) == len(p.Path)
}

// sharedLevels counts how many leading path elements n has in common with
// the plan (the node name counts at the host level).
func (p *GangPlan) sharedLevels(n *Node) int {
	k := 0
	for k < len(p.Path) {
		var v string
		switch {
		case k < len(n.Domains):
			v = n.Domains[k]
		case k == len(n.Domains):
			v = n.Name
		default:
			return k
		}
		if v != p.Path[k] {
			break
		}
		k++
	}
	return k
}

// Score is 100 inside the planned domain and falls off linearly with each
// level the node is further out; without a plan every node scores 0, so the
// term does not reorder anything.
func (p *GangPlan) Score(n *Node) float64 {
	if p == nil || p.Level < 0 || len(p.Path) == 0 {
		return 0
	}
	return 100 * float64(p.sharedLevels(n)) / float64(len(p.Path))
}
