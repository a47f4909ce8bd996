// Package nodeview translates the scheduling framework's view of nodes
// into internal/scoring's plain structs, reading pods through
// internal/podspec. It holds no placement rule.
package nodeview

import (
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Node builds the scoring view of a node: free CPU and memory from the
// framework's accounting, and per-device GPU occupancy rebuilt from the pods
// on it. A pod holds the devices recorded on it (podspec.Devices), as the
// simulator's allocations do; a pod without a record (placed by another
// scheduler) takes the lowest idle devices, or for a share the tightest
// device that fits, after every recorded pod. levels are the topology
// label keys, outermost first (see Domains). A node's GPUs are its
// allocatable nvidia.com/gpu and the whole GPUs it publishes through DRA,
// its MIG instances its nvidia.com/mig-* and those it publishes (addDRAMIG);
// a pod's are podspec.RequestWith's, so a GPU handed out through a
// ResourceClaim counts as one handed out by the device plugin. d may be nil.
func Node(ni fwk.NodeInfo, levels []string, d *DRA) *scoring.Node {
	return build(ni, levels, d, nil, "")
}

// NodeWithout is Node's view of ni as if pod were not on it. Within a
// pod-group cycle the scheduler assumes a member on its snapshot before
// Reserve, so the node Reserve reads holds the pod whose devices it is
// choosing.
func NodeWithout(ni fwk.NodeInfo, levels []string, d *DRA, pod types.UID) *scoring.Node {
	return build(ni, levels, d, nil, pod)
}

// Held is what one pod on a node holds, as Node's view accounts it.
type Held struct {
	Pod   *v1.Pod
	Alloc scoring.Allocation
}

// NodeHeld is Node's view of ni with what each pod on it holds there: its
// CPU and memory requests and the devices the view gave it, so releasing
// a pod's allocation from the view (scoring.Node.Release) leaves the node
// as if the pod had ended.
func NodeHeld(ni fwk.NodeInfo, levels []string, d *DRA) (*scoring.Node, []Held) {
	var held []Held
	n := build(ni, levels, d, func(pod *v1.Pod, r scoring.Request, devices []int, milli int) {
		held = append(held, Held{Pod: pod, Alloc: scoring.Allocation{Node: ni.Node().Name, CPUMilli: r.CPUMilli,
			MemoryMiB: r.MemoryMiB, Devices: devices, Milli: milli, MIG: r.NamedMIG()}})
	}, "")
	return n, held
}

func build(ni fwk.NodeInfo, levels []string, d *DRA, record func(pod *v1.Pod, r scoring.Request, devices []int, milli int), skip types.UID) *scoring.Node {
	node := ni.Node()
	alloc, used := ni.GetAllocatable(), ni.GetRequested()
	cpuUsed, memUsed := used.GetMilliCPU(), used.GetMemory()
	var skippedScalar map[v1.ResourceName]int64
	var skipped *v1.Pod
	if skip != "" {
		for _, pi := range ni.GetPods() {
			if p := pi.GetPod(); p.UID == skip {
				skipped = p
				r := pi.CalculateResource().Resource
				cpuUsed -= r.GetMilliCPU()
				memUsed -= r.GetMemory()
				skippedScalar = r.GetScalarResources()
			}
		}
	}
	n := &scoring.Node{
		Name:          node.Name,
		GPUModel:      node.Labels[podspec.LabelGPUProduct],
		CPUMilliCap:   alloc.GetMilliCPU(),
		CPUMilliFree:  alloc.GetMilliCPU() - cpuUsed,
		MemoryMiBCap:  alloc.GetMemory() >> 20,
		MemoryMiBFree: (alloc.GetMemory() - memUsed) >> 20,
	}
	if len(levels) > 0 {
		n.Domains = DomainsWith(node, levels, d)
	}
	for name, c := range alloc.GetScalarResources() {
		if p, ok := strings.CutPrefix(string(name), podspec.ResourceMIGPrefix); ok && c > 0 {
			if n.MIGCap == nil {
				n.MIGCap, n.MIGFree = map[string]int{}, map[string]int{}
			}
			n.MIGCap[p] = int(c)
			n.MIGFree[p] = int(c - used.GetScalarResources()[name] + skippedScalar[name])
		}
	}
	if inst := d.NodeMIG(node.Name); inst != nil {
		addDRAMIG(n, inst, ni, d, skipped)
	}
	gpus := int(alloc.GetScalarResources()[podspec.ResourceGPU]) + d.NodeGPUs(node.Name)
	if gpus > 0 {
		n.GPUFree = make([]int, gpus)
		for i := range n.GPUFree {
			n.GPUFree[i] = scoring.MilliPerGPU
		}
	} else if record == nil {
		return n
	}
	type pending struct {
		pod *v1.Pod
		r   scoring.Request
	}
	var unrecorded []pending
	for _, pi := range ni.GetPods() {
		pod := pi.GetPod()
		if pod == skipped {
			continue
		}
		r := podspec.RequestWith(pod, d)
		if r.GPUs == 0 || gpus <= 0 {
			if record != nil {
				record(pod, r, nil, 0)
			}
			continue
		}
		if d, ok := podspec.Devices(pod); ok {
			if milli, err := n.TakeDevices(r, d); err == nil {
				if record != nil {
					record(pod, r, d, milli)
				}
				continue
			}
		}
		unrecorded = append(unrecorded, pending{pod, r})
	}
	for _, u := range unrecorded {
		// Placed by another scheduler, or its record no longer fits: the
		// view can only guess, as the node's device plugin chose.
		d := scoring.BestFitDevices(n, u.r)
		milli, err := n.TakeDevices(u.r, d)
		if err != nil {
			d, milli = nil, 0
		}
		if record != nil {
			record(u.pod, u.r, d, milli)
		}
	}
	return n
}

// addDRAMIG adds the MIG instances node n publishes through DRA (inst, by
// profile) to its view, less those the claims of the pods on it (but skip)
// name by profile: the framework's accounting knows only extended
// resources. A claim naming no profile takes an instance the view cannot
// tell, so it takes none here; the DynamicResources plugin places it, as
// scoring's fit leaves MIGAnyProfile to it.
func addDRAMIG(n *scoring.Node, inst map[string]int, ni fwk.NodeInfo, d *DRA, skip *v1.Pod) {
	if n.MIGCap == nil {
		n.MIGCap, n.MIGFree = map[string]int{}, map[string]int{}
	}
	for p, c := range inst {
		n.MIGCap[p] += c
		n.MIGFree[p] += c
	}
	for _, pi := range ni.GetPods() {
		pod := pi.GetPod()
		if pod == skip || len(pod.Spec.ResourceClaims) == 0 {
			continue
		}
		c, _ := podspec.ClaimRequest(pod, d)
		for p, k := range podspec.ClaimMIG(c, podspec.Request(pod).GPUModels) {
			n.MIGFree[p] -= k
		}
	}
}

// OffersShares reports whether the node advertises GPU shares
// (podspec.ResourceGPUMilli). On a node that does not, every GPU pod holds
// whole devices: the framework's count of free whole GPUs is the number of
// idle devices, and which devices a pod holds changes neither a fit nor a
// score, so the per-device check and the device record are needed only
// where shares can land.
func OffersShares(ni fwk.NodeInfo) bool {
	return ni.GetAllocatable().GetScalarResources()[podspec.ResourceGPUMilli] > 0
}

// Domains is node's place in the topology of levels (scoring.NodeDomains).
func Domains(node *v1.Node, levels []string) []string {
	return scoring.NodeDomains(levels, func(key string) string { return node.Labels[key] })
}

// LevelNVLink is the topology level of NVLink domains. A node without its
// label takes the level from the NVLink clique its GPUs publish through
// DRA (dra.AttrClique), so a cluster whose cliques are known only to NVIDIA's
// driver is planned by clique as a labelled one is.
const LevelNVLink = "topology.schedloop.io/nvlink-domain"

// DomainsWith is Domains with the NVLink level read from d where the node has
// no label for it (LevelNVLink).
func DomainsWith(node *v1.Node, levels []string, d *DRA) []string {
	return scoring.NodeDomains(levels, func(key string) string {
		if v, ok := node.Labels[key]; ok || key != LevelNVLink {
			return v
		}
		return d.Clique(node.Name)
	})
}

// Version identifies what a NodeInfo holds, for views and scores kept
// between cycles. The scheduler's cache gives a NodeInfo a new generation
// on every change to the node or the pods on it, but the generation alone
// does not say what the node holds: within a pod-group cycle the scheduler
// places each member on its snapshot as a trial (Snapshot.AssumePod) and
// takes the trials back (ForgetPod), keeping the NodeInfo's generation
// through both. A view built during a trial would outlive it, and one built
// before it would hide the member placed. Trials are taken back last in,
// first out, each adding a fresh copy of its pod at the end of the node's
// pods, so the generation, the number of pods and the last one tell every
// state of a node apart.
type Version struct {
	generation int64
	pods       int
	last       fwk.PodInfo
}

// VersionOf is ni's Version.
func VersionOf(ni fwk.NodeInfo) Version {
	pods := ni.GetPods()
	v := Version{generation: ni.GetGeneration(), pods: len(pods)}
	if len(pods) > 0 {
		v.last = pods[len(pods)-1]
	}
	return v
}

// Cache keeps the scoring view of each node for as long as the node's
// Version stays the same; between two pods only the nodes that changed are
// rebuilt.
//
// Views it returns are shared: callers must not change them (clone with
// scoring.CloneNodes for trial placements).
type Cache struct {
	levels []string
	dra    *DRA

	mu     sync.Mutex
	byName map[string]cachedNode
}

type cachedNode struct {
	version Version
	slices  int64
	node    *scoring.Node
}

// NewCache returns an empty cache building views with the given topology
// levels and DRA reader (see Node). A view is rebuilt when its node's
// NodeInfo or its ResourceSlices change.
func NewCache(levels []string, d *DRA) *Cache {
	return &Cache{levels: levels, dra: d, byName: map[string]cachedNode{}}
}

// Node is Node(ni, levels), from the cache when ni has not changed.
func (c *Cache) Node(ni fwk.NodeInfo) *scoring.Node {
	name, version := ni.Node().Name, VersionOf(ni)
	slices := c.dra.Version(name)
	c.mu.Lock()
	e, ok := c.byName[name]
	c.mu.Unlock()
	if ok && e.version == version && e.slices == slices {
		return e.node
	}
	n := Node(ni, c.levels, c.dra)
	c.mu.Lock()
	c.byName[name] = cachedNode{version: version, slices: slices, node: n}
	c.mu.Unlock()
	return n
}

// Nodes is Nodes(nis, levels), from the cache where nothing changed. It
// drops views of nodes that are gone when the cache holds many more nodes
// than nis lists.
func (c *Cache) Nodes(nis []fwk.NodeInfo) []*scoring.Node {
	out := make([]*scoring.Node, 0, len(nis))
	for _, ni := range nis {
		if ni.Node() != nil {
			out = append(out, c.Node(ni))
		}
	}
	c.mu.Lock()
	if len(c.byName) > 2*len(out)+64 {
		keep := make(map[string]cachedNode, len(out))
		for _, n := range out {
			keep[n.Name] = c.byName[n.Name]
		}
		c.byName = keep
	}
	c.mu.Unlock()
	return out
}

// Len is how many node views the cache holds.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byName)
}
