// Package nodeview translates the scheduling framework's view of pods and
// nodes into internal/scoring's plain structs, and reads the labels that put
// a pod in a gang or a queue. It holds no placement rule.
package nodeview

import (
	"strconv"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/scoring"
)

const (
	// ResourceGPU is the whole-GPU extended resource.
	ResourceGPU v1.ResourceName = "nvidia.com/gpu"
	// LabelGPUProduct is the GPU model label GPU feature discovery sets.
	LabelGPUProduct = podspec.LabelGPUProduct
	// AnnotationGPUMilli on a pod asking for one GPU says it needs only
	// this share of the device (1..999 milli-GPU).
	AnnotationGPUMilli = "schedloop.io/gpu-milli"
	// LabelQueue is Kueue's queue label, which schedloop accepts as is.
	LabelQueue = "kueue.x-k8s.io/queue-name"
)

// Request is what pod asks of a node, in scoring's terms.
func Request(pod *v1.Pod) scoring.Request {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	r := scoring.Request{CPUMilli: reqs.Cpu().MilliValue(), MemoryMiB: reqs.Memory().Value() >> 20}
	if q, ok := reqs[ResourceGPU]; ok {
		r.GPUs = int(q.Value())
	}
	if r.GPUs == 1 {
		r.GPUMilli = gpuMilli(pod)
	}
	r.GPUModels = podspec.GPUModels(pod)
	return r
}

func gpuMilli(pod *v1.Pod) int {
	s, ok := pod.Annotations[AnnotationGPUMilli]
	if !ok {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 || v >= scoring.MilliPerGPU {
		return 0
	}
	return v
}

// Node builds the scoring view of a node: free CPU and memory from the
// framework's accounting, and per-device GPU occupancy rebuilt from the pods
// on it (whole-GPU pods take whole devices, shared pods are packed onto the
// tightest device, in pod order). levels are the topology label keys,
// outermost first (see Domains).
func Node(ni fwk.NodeInfo, levels []string) *scoring.Node {
	node := ni.Node()
	alloc, used := ni.GetAllocatable(), ni.GetRequested()
	n := &scoring.Node{
		Name:          node.Name,
		GPUModel:      node.Labels[LabelGPUProduct],
		CPUMilliCap:   alloc.GetMilliCPU(),
		CPUMilliFree:  alloc.GetMilliCPU() - used.GetMilliCPU(),
		MemoryMiBCap:  alloc.GetMemory() >> 20,
		MemoryMiBFree: (alloc.GetMemory() - used.GetMemory()) >> 20,
	}
	if len(levels) > 0 {
		n.Domains = Domains(node, levels)
	}
	gpus := int(alloc.GetScalarResources()[ResourceGPU])
	if gpus <= 0 {
		return n
	}
	n.GPUFree = make([]int, gpus)
	for i := range n.GPUFree {
		n.GPUFree[i] = scoring.MilliPerGPU
	}
	whole := int(used.GetScalarResources()[ResourceGPU])
	var shared []int
	for _, pi := range ni.GetPods() {
		if m := gpuMilli(pi.GetPod()); m > 0 {
			shared = append(shared, m)
		}
	}
	whole = min(max(whole-len(shared), 0), gpus)
	for i := 0; i < whole; i++ {
		n.GPUFree[i] = 0
	}
	for _, m := range shared {
		if d := scoring.BestFitDevices(n, scoring.Request{GPUs: 1, GPUMilli: m}); len(d) == 1 {
			n.GPUFree[d[0]] -= m
		}
	}
	return n
}

// Domains is node's place in the topology of levels (scoring.NodeDomains).
func Domains(node *v1.Node, levels []string) []string {
	return scoring.NodeDomains(levels, func(key string) string { return node.Labels[key] })
}

// Nodes builds the scoring view of each node.
func Nodes(nis []fwk.NodeInfo, levels []string) []*scoring.Node {
	out := make([]*scoring.Node, 0, len(nis))
	for _, ni := range nis {
		if ni.Node() != nil {
			out = append(out, Node(ni, levels))
		}
	}
	return out
}

// GangKey is namespace/name of the PodGroup pod belongs to, through the
// scheduler-plugins label.
func GangKey(pod *v1.Pod) (key, name string, ok bool) {
	name = pod.Labels[podgroup.LabelPodGroup]
	if name == "" {
		return "", "", false
	}
	return pod.Namespace + "/" + name, name, true
}

// Queue is the queue pod is submitted to, "" for none.
func Queue(pod *v1.Pod) string { return pod.Labels[LabelQueue] }

// Cache keeps the scoring view of each node for as long as the node's
// NodeInfo generation stays the same. The scheduler bumps a NodeInfo's
// generation on every change to the node or the pods on it, so a view
// built at one generation stays exact until then; between two pods only
// the nodes that changed are rebuilt.
//
// Views it returns are shared: callers must not change them (clone with
// scoring.CloneNodes for trial placements).
type Cache struct {
	levels []string

	mu     sync.Mutex
	byName map[string]cachedNode
}

type cachedNode struct {
	generation int64
	node       *scoring.Node
}

// NewCache returns an empty cache building views with the given topology
// levels (see Node).
func NewCache(levels []string) *Cache {
	return &Cache{levels: levels, byName: map[string]cachedNode{}}
}

// Node is Node(ni, levels), from the cache when ni has not changed.
func (c *Cache) Node(ni fwk.NodeInfo) *scoring.Node {
	name, gen := ni.Node().Name, ni.GetGeneration()
	c.mu.Lock()
	e, ok := c.byName[name]
	c.mu.Unlock()
	if ok && e.generation == gen {
		return e.node
	}
	n := Node(ni, c.levels)
	c.mu.Lock()
	c.byName[name] = cachedNode{generation: gen, node: n}
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
