package scoring

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Term names one scoring rule. Profiles weight terms by these names, so they
// are part of the configuration surface and never change meaning.
type Term string

const (
	// TermFragmentation prefers placements that leave the least expected
	// fragmented GPU capacity for the typical workload (FGD).
	TermFragmentation Term = "fragmentation"
	// TermBestFit prefers nodes whose free CPU and GPU are closest to the
	// request (FGD paper's BestFit baseline).
	TermBestFit Term = "bestfit"
	// TermPacking prefers partly used devices, then partly used nodes, then
	// idle ones, in whole-number bands (the paper's GPU Packing baseline).
	TermPacking Term = "packing"
	// TermBinPack prefers nodes with the highest share of their dominant
	// requested resource allocated after placement.
	TermBinPack Term = "binpack"
	// TermSpread is the opposite of TermBinPack: emptier nodes first.
	TermSpread Term = "spread"
	// TermDotProduct prefers nodes whose free resources align least with the
	// request (the paper's DotProd baseline).
	TermDotProduct Term = "dotprod"
	// TermTopology prefers nodes inside the topology domain chosen for the
	// pod's gang, falling off with each level the node is further away.
	TermTopology Term = "topology"
)

// Terms lists every term in a fixed order.
var Terms = []Term{TermFragmentation, TermBestFit, TermPacking, TermBinPack, TermSpread, TermDotProduct, TermTopology}

// MaxWeight bounds each term's weight, as the framework bounds plugin weights.
const MaxWeight = 100

// Weights says how much each term counts. Absent terms count zero.
type Weights map[Term]float64

// DefaultWeights is the profile schedloop starts from before any tuning:
// keep gangs close, then avoid fragmentation, then pack.
func DefaultWeights() Weights {
	return Weights{TermTopology: 10, TermFragmentation: 5, TermBestFit: 2}
}

// Validate names the first weight that is unknown, not finite or out of
// bounds, and refuses a profile where every weight is zero.
func (w Weights) Validate() error {
	names := make([]string, 0, len(w))
	for t := range w {
		names = append(names, string(t))
	}
	sort.Strings(names)
	total := 0.0
	for _, name := range names {
		v := w[Term(name)]
		if !slices.Contains(Terms, Term(name)) {
			return fmt.Errorf("weights.%s: unknown score term (known: %s)", name, termList())
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxWeight {
			return fmt.Errorf("weights.%s: %v is outside 0..%d", name, v, MaxWeight)
		}
		total += v
	}
	if total == 0 {
		return fmt.Errorf("weights: every term is zero; at least one must be positive")
	}
	return nil
}

func termList() string {
	s := make([]string, len(Terms))
	for i, t := range Terms {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

// Scorer turns weights into one number per feasible node for a request.
// The scheduler's Score plugin and the simulator both call Score, so a tuned
// profile means the same thing in both.
type Scorer struct {
	Weights Weights
	// Workload is the typical pod mix TermFragmentation measures against.
	Workload Workload
	// Plan, when set, is the topology domain chosen for the pod's gang.
	Plan *GangPlan
}

// Score returns the weighted score of placing r on n, in [0, 100], and the
// devices the placement would use. r must fit n (see Node.Fit).
func (s *Scorer) Score(n *Node, r Request) (float64, []int) {
	var devices []int
	var frag float64
	wFrag := s.Weights[TermFragmentation]
	if wFrag > 0 && len(s.Workload) > 0 {
		// A CPU-only pod fragments GPUs too: the CPU it takes can leave a
		// node's free GPUs unusable for the typical pods.
		devices, frag = FragmentationChoice(n, r, s.Workload)
	} else {
		devices = BestFitDevices(n, r)
		if wFrag > 0 {
			// No workload model: nothing to measure fragmentation against.
			frag = 50
		}
	}
	var sum, total float64
	add := func(t Term, v float64) {
		if w := s.Weights[t]; w > 0 {
			sum += w * v
			total += w
		}
	}
	add(TermFragmentation, frag)
	if s.Weights[TermBestFit] > 0 {
		add(TermBestFit, bestFit(n, r))
	}
	if s.Weights[TermPacking] > 0 {
		add(TermPacking, packing(n, r, devices))
	}
	if s.Weights[TermBinPack] > 0 || s.Weights[TermSpread] > 0 {
		b := binPack(n, r)
		add(TermBinPack, b)
		add(TermSpread, 100-b)
	}
	if s.Weights[TermDotProduct] > 0 {
		add(TermDotProduct, dotProduct(n, r))
	}
	if s.Weights[TermTopology] > 0 {
		add(TermTopology, s.Plan.Score(n))
	}
	if total == 0 {
		return 0, devices
	}
	return sum / total, devices
}

// NodeScore is Score rounded to the framework's integer range 0..100.
func (s *Scorer) NodeScore(n *Node, r Request) int64 {
	v, _ := s.Score(n, r)
	return int64(math.Round(v))
}

// The BestFit baseline normalises by the largest node shape of the paper's
// cluster (128 cores, 8 GPUs) so scores compare across node sizes.
const (
	bestFitMaxCPUMilli = 128000
	bestFitMaxGPUMilli = 8 * MilliPerGPU
)

func bestFit(n *Node, r Request) float64 {
	cpuLeft := float64(n.CPUMilliFree-r.CPUMilli) / bestFitMaxCPUMilli
	gpuLeft := float64(n.FreeGPUMilli()-r.TotalGPUMilli()) / bestFitMaxGPUMilli
	return clamp100((1 - 0.5*cpuLeft - 0.5*gpuLeft) * 100)
}

// packing is the GPU Packing baseline's banded score, as the paper's
// artifact computes it (whole numbers, so ties go to the name order):
// a shared request on a partly used device scores 90..100, more for the
// less that device had free; a request that needs idle devices on a partly
// used node scores 50 minus the devices it takes (at least 33); on an idle
// node, 33 minus its device count, so small idle nodes go first. The bands
// ignore how full a partly used node is: among such nodes the first by name
// wins, which packs as first-fit does. A request without GPUs scores 0 on
// every node, as in the artifact: GPU packing has nothing to say about it,
// and alone the term leaves it to the name order (first fit).
func packing(n *Node, r Request, devices []int) float64 {
	if r.GPUs == 0 {
		return 0
	}
	capacity, idle := n.GPUCap(), n.IdleGPUs()
	if idle == capacity {
		return float64(max(33-idle, idle))
	}
	if r.Shared() && len(devices) == 1 && n.GPUFree[devices[0]] < MilliPerGPU {
		freePct := n.GPUFree[devices[0]] * 100 / MilliPerGPU
		return float64(max(100-freePct/10, 50))
	}
	return float64(max(50-r.GPUs, 33))
}

func binPack(n *Node, r Request) float64 {
	if r.GPUs > 0 && n.GPUCap() > 0 {
		used := float64(int64(n.GPUCap())*MilliPerGPU-n.FreeGPUMilli()+r.TotalGPUMilli()) / float64(n.GPUCap()*MilliPerGPU)
		return clamp100(used * 100)
	}
	if n.CPUMilliCap == 0 {
		return 0
	}
	return clamp100(float64(n.CPUMilliCap-n.CPUMilliFree+r.CPUMilli) / float64(n.CPUMilliCap) * 100)
}

func dotProduct(n *Node, r Request) float64 {
	var dot float64
	dims := 0
	if n.CPUMilliCap > 0 {
		dot += float64(n.CPUMilliFree) / float64(n.CPUMilliCap) * float64(r.CPUMilli) / float64(n.CPUMilliCap)
		dims++
	}
	if n.GPUCap() > 0 {
		capMilli := float64(n.GPUCap() * MilliPerGPU)
		dot += float64(n.FreeGPUMilli()) / capMilli * float64(r.TotalGPUMilli()) / capMilli
		dims++
	}
	if dims == 0 {
		return 0
	}
	return clamp100((1 - dot/float64(dims)) * 100)
}

func clamp01(v float64) float64 { return math.Min(1, math.Max(0, v)) }

func clamp100(v float64) float64 { return math.Min(100, math.Max(0, v)) }
