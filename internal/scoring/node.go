package scoring

import (
	"fmt"
	"maps"
	"slices"
)

// MilliPerGPU is one whole device in the milli-GPU unit GPU sharing uses.
const MilliPerGPU = 1000

// Request is what one pod asks of a node.
type Request struct {
	CPUMilli  int64
	MemoryMiB int64
	// GPUs counts devices. With GPUMilli between 1 and 999 the pod shares
	// one device (GPUs must then be 1); otherwise it takes GPUs whole devices.
	GPUs     int
	GPUMilli int
	// GPUModels restricts which device models qualify; empty allows any.
	GPUModels []string
	// MIG counts the MIG instances asked for by profile ("1g.10gb" -> 2);
	// MIGAnyProfile counts those asked for through a ResourceClaim that names
	// none. Nil, empty and a count of zero all ask for none. Instances are
	// not devices: GPUs and GPUMilli say nothing of them, a node holds them
	// apart (Node.MIGFree), and they count toward queues by their share of
	// a GPU's compute (MIGMilli).
	MIG map[string]int
}

// asksGPU reports whether r asks for any GPU: devices, a share or MIG
// instances, each of which GPUModels restricts.
func (r Request) asksGPU() bool {
	if r.GPUs > 0 {
		return true
	}
	for _, c := range r.MIG {
		if c > 0 {
			return true
		}
	}
	return false
}

// Shared reports whether r asks for a share of one device.
func (r Request) Shared() bool { return r.GPUs == 1 && r.GPUMilli > 0 && r.GPUMilli < MilliPerGPU }

// TotalGPUMilli is the GPU capacity r consumes, in milli-GPU.
func (r Request) TotalGPUMilli() int64 {
	if r.Shared() {
		return int64(r.GPUMilli)
	}
	return int64(r.GPUs) * MilliPerGPU
}

// Validate names the first field of r that cannot be satisfied by any node.
func (r Request) Validate() error {
	switch {
	case r.CPUMilli < 0:
		return fmt.Errorf("cpu_milli %d is negative", r.CPUMilli)
	case r.MemoryMiB < 0:
		return fmt.Errorf("memory_mib %d is negative", r.MemoryMiB)
	case r.GPUs < 0:
		return fmt.Errorf("gpus %d is negative", r.GPUs)
	case r.GPUMilli < 0 || r.GPUMilli > MilliPerGPU:
		return fmt.Errorf("gpu_milli %d is outside 0..1000", r.GPUMilli)
	case r.GPUMilli > 0 && r.GPUMilli < MilliPerGPU && r.GPUs != 1:
		return fmt.Errorf("gpu_milli %d shares one device, but gpus is %d (want 1)", r.GPUMilli, r.GPUs)
	}
	return r.validateMIG()
}

// Node is the scheduling view of one machine: capacity, what is free, and
// where it sits in the topology. The simulator owns Nodes directly; the
// scheduler plugins build them from the framework's NodeInfo.
type Node struct {
	Name string
	// Domains holds the node's value at each topology level, outermost first,
	// aligned with the Levels in use (e.g. spine, rack, NVLink domain).
	Domains  []string
	GPUModel string

	CPUMilliCap, CPUMilliFree   int64
	MemoryMiBCap, MemoryMiBFree int64
	// GPUFree is the free milli-GPU of each device (MilliPerGPU = idle).
	GPUFree []int
	// MIGCap and MIGFree are the MIG instances of each profile the node
	// has and has free ("1g.10gb" -> 3), as the NVIDIA device plugin's
	// mixed strategy advertises them; a profile absent, or a nil map, has
	// none. The GPUs partitioned into them are not in GPUFree.
	MIGCap, MIGFree map[string]int
}

// NewNode returns an empty node with gpus idle devices.
func NewNode(name, model string, gpus int, cpuMilli, memoryMiB int64, domains ...string) *Node {
	free := make([]int, gpus)
	for i := range free {
		free[i] = MilliPerGPU
	}
	return &Node{Name: name, Domains: domains, GPUModel: model, CPUMilliCap: cpuMilli, CPUMilliFree: cpuMilli,
		MemoryMiBCap: memoryMiB, MemoryMiBFree: memoryMiB, GPUFree: free}
}

// Clone returns a deep copy, for trial placements.
func (n *Node) Clone() *Node {
	c := *n
	c.GPUFree = slices.Clone(n.GPUFree)
	c.MIGFree = maps.Clone(n.MIGFree)
	c.MIGCap = maps.Clone(n.MIGCap)
	return &c
}

// Empty is n as it would be with nothing placed on it: every device idle,
// every MIG instance free; the question of whether a request could ever
// fit it.
func (n *Node) Empty() *Node {
	e := NewNode(n.Name, n.GPUModel, n.GPUCap(), n.CPUMilliCap, n.MemoryMiBCap, n.Domains...)
	e.MIGCap, e.MIGFree = maps.Clone(n.MIGCap), maps.Clone(n.MIGCap)
	return e
}

// GPUCap is the node's device count.
func (n *Node) GPUCap() int { return len(n.GPUFree) }

// FreeGPUMilli sums the free share of every device.
func (n *Node) FreeGPUMilli() int64 {
	var s int64
	for _, f := range n.GPUFree {
		s += int64(f)
	}
	return s
}

// IdleGPUs counts devices nobody holds any share of.
func (n *Node) IdleGPUs() int {
	c := 0
	for _, f := range n.GPUFree {
		if f == MilliPerGPU {
			c++
		}
	}
	return c
}

// maxFree is the largest free share of any one device (0 without devices).
func (n *Node) maxFree() int {
	m := 0
	for _, f := range n.GPUFree {
		m = max(m, f)
	}
	return m
}

// Reason says why a request does not fit a node. The strings are stable:
// the collector counts them.
type Reason string

const (
	Fits               Reason = ""
	ReasonCPU          Reason = "Insufficient cpu"
	ReasonMemory       Reason = "Insufficient memory"
	ReasonGPU          Reason = "Insufficient nvidia.com/gpu"
	ReasonGPUShare     Reason = "no GPU has the requested share free"
	ReasonGPUModel     Reason = "GPU model not allowed"
	ReasonMIG          Reason = "Insufficient MIG instances"
	ReasonInvalidShape Reason = "request shape invalid"
)

// Fit reports whether r fits n now, and if not the first reason why.
func (n *Node) Fit(r Request) Reason {
	if r.asksGPU() && len(r.GPUModels) > 0 && !slices.Contains(r.GPUModels, n.GPUModel) {
		return ReasonGPUModel
	}
	if r.CPUMilli > n.CPUMilliFree {
		return ReasonCPU
	}
	if r.MemoryMiB > n.MemoryMiBFree {
		return ReasonMemory
	}
	switch {
	case r.Shared():
		if n.maxFree() < r.GPUMilli {
			return ReasonGPUShare
		}
	case r.GPUs > 0:
		if n.IdleGPUs() < r.GPUs {
			return ReasonGPU
		}
	}
	if !n.migFits(r) {
		return ReasonMIG
	}
	return Fits
}

// Allocation is what placing one pod took from a node.
type Allocation struct {
	Node      string
	CPUMilli  int64
	MemoryMiB int64
	// Devices are the device indices used; each gave Milli (MilliPerGPU for
	// whole devices).
	Devices []int
	Milli   int
	// MIG is the MIG instances taken, by profile (Request.MIG's named
	// profiles).
	MIG map[string]int
}

// Allocate takes r from n using the given devices (for a shared request,
// exactly one device; for whole devices, r.GPUs idle ones). It returns an
// error, changing nothing, when the devices cannot serve r.
func (n *Node) Allocate(r Request, devices []int) (Allocation, error) {
	if reason := n.Fit(r); reason != Fits {
		return Allocation{}, fmt.Errorf("node %s: %s", n.Name, reason)
	}
	milli, err := n.TakeDevices(r, devices)
	if err != nil {
		return Allocation{}, err
	}
	n.CPUMilliFree -= r.CPUMilli
	n.MemoryMiBFree -= r.MemoryMiB
	mig := n.TakeMIG(r)
	return Allocation{Node: n.Name, CPUMilli: r.CPUMilli, MemoryMiB: r.MemoryMiB, Devices: slices.Clone(devices), Milli: milli, MIG: mig}, nil
}

// TakeMIG takes the instances of named profiles r asks for
// (Request.NamedMIG) from n's free ones and returns them, for the
// Allocation; Fit has checked they are free.
func (n *Node) TakeMIG(r Request) map[string]int {
	took := r.NamedMIG()
	for p, c := range took {
		if n.MIGFree == nil {
			n.MIGFree = map[string]int{}
		}
		n.MIGFree[p] -= c
	}
	return took
}

// TakeDevices is the GPU part of Allocate: it takes r's share of each of
// devices, or returns an error changing nothing when they cannot serve r.
// The scheduler rebuilds a node's devices from the pods on it with it,
// whose CPU and memory the framework has already counted.
func (n *Node) TakeDevices(r Request, devices []int) (milli int, err error) {
	milli = MilliPerGPU
	if r.Shared() {
		milli = r.GPUMilli
	}
	if len(devices) != r.GPUs {
		return 0, fmt.Errorf("node %s: %d devices chosen for a request of %d", n.Name, len(devices), r.GPUs)
	}
	for i, d := range devices {
		if d < 0 || d >= len(n.GPUFree) || n.GPUFree[d] < milli || slices.Contains(devices[:i], d) {
			return 0, fmt.Errorf("node %s: device %d cannot give %d milli-GPU", n.Name, d, milli)
		}
	}
	for _, d := range devices {
		n.GPUFree[d] -= milli
	}
	return milli, nil
}

// Release returns what a earlier Allocate took.
func (n *Node) Release(a Allocation) {
	for _, d := range a.Devices {
		n.GPUFree[d] = min(n.GPUFree[d]+a.Milli, MilliPerGPU)
	}
	for p, c := range a.MIG {
		if n.MIGFree == nil {
			n.MIGFree = map[string]int{}
		}
		n.MIGFree[p] = min(n.MIGFree[p]+c, n.MIGCap[p])
	}
	n.CPUMilliFree = min(n.CPUMilliFree+a.CPUMilli, n.CPUMilliCap)
	n.MemoryMiBFree = min(n.MemoryMiBFree+a.MemoryMiB, n.MemoryMiBCap)
}

// IdleDevices returns the first k idle devices, lowest index first: all
// idle devices are alike, and a stable choice keeps replays reproducible.
func (n *Node) IdleDevices(k int) []int {
	out := make([]int, 0, k)
	for i, f := range n.GPUFree {
		if len(out) == k {
			break
		}
		if f == MilliPerGPU {
			out = append(out, i)
		}
	}
	return out
}
