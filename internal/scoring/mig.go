package scoring

import (
	"fmt"
	"maps"
	"slices"

	"github.com/schedloop/schedloop"
)

// MIGAnyProfile is the Request.MIG key of MIG instances asked for without
// a profile: a ResourceClaim of NVIDIA's MIG DeviceClass whose selectors
// name none (dra.SelectorProfile) lets the allocator hand out any
// instance, so which one, and how large, is known only once it has.
const MIGAnyProfile = ""

// MIGMilli is how much of a GPU one MIG instance of profile counts for
// toward queue limits, GPU accounting and preemption cost: its compute
// slices over its GPU's (schedloop.MIGProfileSlices over
// schedloop.MIGSlices), in milli-GPU, rounded down so that the instances of
// one GPU never count for more than the GPU (seven 1g instances of an A100
// count 7 × 142 = 994).
//
// A request does not know the GPU its instance will be cut from, so the
// GPU's model is read from what the request allows: models, the GPU models
// it is restricted to (Request.GPUModels). When every one of them has the
// same slice count, that count is used (1g on A30 = 250, on H100 = 142);
// when models is empty (any GPU), or its models differ, the GPU is taken to
// have seven slices, the geometry of A100, H100, H200 and B200 and what
// schedloop.MIGSlices gives a model it does not know. MIGAnyProfile counts
// as one slice, the least any instance holds. The error names a profile
// with no slice count or more slices than its GPU has; such a profile
// counts nothing.
func MIGMilli(profile string, models []string) (int64, error) {
	total := migSlices(models)
	n := 1
	if profile != MIGAnyProfile {
		var err error
		if n, err = schedloop.MIGProfileSlices(profile); err != nil {
			return 0, err
		}
	}
	if n > total {
		return 0, fmt.Errorf("MIG profile %q: %d compute slices, but the GPU it is asked of has %d", profile, n, total)
	}
	return int64(n) * MilliPerGPU / int64(total), nil
}

// migSlices is the slice count MIGMilli divides by for a request allowed
// models.
func migSlices(models []string) int {
	total := schedloop.MIGSlices("")
	for i, m := range models {
		s := schedloop.MIGSlices(m)
		if i > 0 && s != total {
			return schedloop.MIGSlices("")
		}
		total = s
	}
	return total
}

// MIGMilli sums MIGMilli over the instances r asks for. A count of zero or
// less, or a profile MIGMilli refuses (Validate names it), adds nothing.
func (r Request) MIGMilli() int64 {
	var sum int64
	for p, c := range r.MIG {
		if c <= 0 {
			continue
		}
		m, err := MIGMilli(p, r.GPUModels)
		if err == nil {
			sum += int64(c) * m
		}
	}
	return sum
}

// CountedMilli is what r counts for toward a queue's GPU limit, the GPU
// accounting of queues and the cost of preempting it: its devices or share
// (TotalGPUMilli) and its MIG instances (MIGMilli).
func (r Request) CountedMilli() int64 { return r.TotalGPUMilli() + r.MIGMilli() }

// NamedMIG is the instances r asks for by a named profile, with a count
// above zero: those a node's free instances (Node.MIGFree) are taken from.
// Nil when there are none.
func (r Request) NamedMIG() map[string]int {
	var out map[string]int
	for p, c := range r.MIG {
		if p != MIGAnyProfile && c > 0 {
			if out == nil {
				out = map[string]int{}
			}
			out[p] = c
		}
	}
	return out
}

// validateMIG names the first MIG instance count of r no node can serve.
func (r Request) validateMIG() error {
	for _, p := range slices.Sorted(maps.Keys(r.MIG)) {
		if c := r.MIG[p]; c < 0 {
			return fmt.Errorf("mig[%s] %d is negative", p, c)
		}
		if _, err := MIGMilli(p, r.GPUModels); err != nil {
			return fmt.Errorf("mig[%s]: %w", p, err)
		}
	}
	return nil
}

// migFits reports whether n has every instance of a named profile r asks
// for free. Instances of MIGAnyProfile are left to the DynamicResources
// plugin, which alone knows the devices a node's ResourceSlices publish:
// they fit any node here.
func (n *Node) migFits(r Request) bool {
	for p, c := range r.MIG {
		if p != MIGAnyProfile && c > 0 && n.MIGFree[p] < c {
			return false
		}
	}
	return true
}
