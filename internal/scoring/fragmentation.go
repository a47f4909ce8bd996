package scoring

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Fragmentation follows "Beware of Fragmentation" (Weng et al., USENIX ATC
// 2023): a node's free GPU capacity is fragmented with respect to a pod shape
// when that shape cannot use it, and a node's fragmentation is the expected
// fragmented capacity over the cluster's typical workload. Placing a pod
// where it lowers expected fragmentation most keeps whole devices free for
// the shapes that will come.

// PodClass is one request shape of the typical workload and its share of pods.
type PodClass struct {
	Request Request
	Share   float64
}

// Workload is the typical pod mix fragmentation is measured against.
type Workload []PodClass

// TypicalWorkload groups requests by shape and keeps the most frequent shapes
// until they cover the given fraction of requests (the paper uses 0.95),
// with shares renormalised to sum to 1. Ties are broken by shape so the
// result does not depend on input order.
func TypicalWorkload(reqs []Request, coverage float64) Workload {
	type class struct {
		key   string
		req   Request
		count int
	}
	byKey := map[string]*class{}
	for _, r := range reqs {
		k := shapeKey(r)
		c := byKey[k]
		if c == nil {
			c = &class{key: k, req: r}
			byKey[k] = c
		}
		c.count++
	}
	classes := make([]*class, 0, len(byKey))
	for _, c := range byKey {
		classes = append(classes, c)
	}
	slices.SortFunc(classes, func(a, b *class) int {
		if c := cmp.Compare(b.count, a.count); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	var w Workload
	covered, total := 0, len(reqs)
	for _, c := range classes {
		if total > 0 && float64(covered) >= coverage*float64(total) {
			break
		}
		w = append(w, PodClass{Request: c.req, Share: float64(c.count)})
		covered += c.count
	}
	for i := range w {
		w[i].Share /= float64(covered)
	}
	return w
}

func shapeKey(r Request) string {
	var b strings.Builder
	b.Grow(48)
	b.WriteString(itoa(r.CPUMilli))
	b.WriteByte('/')
	b.WriteString(itoa(int64(r.GPUs)))
	b.WriteByte('/')
	b.WriteString(itoa(int64(r.GPUMilli)))
	b.WriteByte('/')
	b.WriteString(strings.Join(r.GPUModels, "|"))
	return b.String()
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// nodeSummary is what every class's fit test needs from a node, computed
// once per Fragmentation call instead of once per class.
type nodeSummary struct {
	maxFree, idle int
	free          int64
}

func summarise(n *Node) nodeSummary {
	var s nodeSummary
	for _, f := range n.GPUFree {
		s.free += int64(f)
		s.maxFree = max(s.maxFree, f)
		if f == MilliPerGPU {
			s.idle++
		}
	}
	return s
}

// fits is Node.Fit(m) == Fits, answered from the summary.
func (s nodeSummary) fits(n *Node, m Request) bool {
	if m.GPUs > 0 && len(m.GPUModels) > 0 && !slices.Contains(m.GPUModels, n.GPUModel) {
		return false
	}
	if m.CPUMilli > n.CPUMilliFree || m.MemoryMiB > n.MemoryMiBFree {
		return false
	}
	switch {
	case m.Shared():
		return s.maxFree >= m.GPUMilli
	case m.GPUs > 0:
		return s.idle >= m.GPUs
	}
	return true
}

// classFragment is the free milli-GPU of n that pod shape m cannot use.
func classFragment(n *Node, s nodeSummary, m Request) int64 {
	if !s.fits(n, m) {
		return s.free
	}
	var threshold int
	switch {
	case m.Shared():
		threshold = m.GPUMilli
	case m.GPUs > 0:
		threshold = MilliPerGPU
	default:
		return 0
	}
	var frag int64
	for _, f := range n.GPUFree {
		if f < threshold {
			frag += int64(f)
		}
	}
	return frag
}

// Fragmentation is n's expected fragmented milli-GPU over workload w.
func Fragmentation(n *Node, w Workload) float64 {
	s := summarise(n)
	var f float64
	for _, c := range w {
		f += c.Share * float64(classFragment(n, s, c.Request))
	}
	return f
}

// fragmentationAfter is Fragmentation of n once r took the given devices.
// It works on a copy held on the stack (for up to 16 devices), so scoring
// every node allocates nothing and n is only read: the scheduler shares one
// cached view of a node between cycles.
func fragmentationAfter(n *Node, r Request, devices []int, w Workload) float64 {
	milli := MilliPerGPU
	if r.Shared() {
		milli = r.GPUMilli
	}
	var buf [16]int
	after := *n
	after.GPUFree = append(buf[:0], n.GPUFree...)
	for _, d := range devices {
		after.GPUFree[d] -= milli
	}
	after.CPUMilliFree -= r.CPUMilli
	after.MemoryMiBFree -= r.MemoryMiB
	return Fragmentation(&after, w)
}

// FragmentationChoice returns the devices that minimise n's fragmentation
// after placing r (for a shared request every device with room is tried),
// and the paper's score for that choice: sigmoid(ΔF/1000)·100, where ΔF is
// the fragmentation removed. r must fit n.
func FragmentationChoice(n *Node, r Request, w Workload) (devices []int, score float64) {
	before := Fragmentation(n, w)
	if !r.Shared() {
		devices = n.IdleDevices(r.GPUs)
		return devices, fragScore(before - fragmentationAfter(n, r, devices, w))
	}
	best, bestAfter := -1, math.Inf(1)
	one := []int{0}
	for d, f := range n.GPUFree {
		// Devices with equal free shares leave equal nodes behind: only the
		// first of them can win (ties keep the lower index), so skip the rest.
		if f < r.GPUMilli || slices.Contains(n.GPUFree[:d], f) {
			continue
		}
		one[0] = d
		if after := fragmentationAfter(n, r, one, w); after < bestAfter {
			best, bestAfter = d, after
		}
	}
	if best < 0 {
		return nil, 0
	}
	return []int{best}, fragScore(before - bestAfter)
}

func fragScore(delta float64) float64 { return 100 / (1 + math.Exp(-delta/1000)) }

// BestFitDevices picks devices for r without a workload model: the tightest
// device for a shared request (least free share that still fits, lowest
// index on ties), the lowest-numbered idle devices otherwise.
func BestFitDevices(n *Node, r Request) []int {
	if !r.Shared() {
		return n.IdleDevices(r.GPUs)
	}
	best := -1
	for d, f := range n.GPUFree {
		if f >= r.GPUMilli && (best < 0 || f < n.GPUFree[best]) {
			best = d
		}
	}
	if best < 0 {
		return nil
	}
	return []int{best}
}
