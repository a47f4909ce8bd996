package nodeview

import (
	"fmt"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/client-go/informers"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/schedloop/schedloop/internal/dra"
)

// DRA is what the views read of GPUs handed out through Dynamic Resource
// Allocation: the specs of the claims and templates pods name (it is a
// podspec.ClaimSpecs) and the whole GPUs and MIG instances each node
// publishes in ResourceSlices. A nil *DRA reads none: pods count only their extended
// resources and nodes only their allocatable nvidia.com/gpu.
type DRA struct {
	claims    resourcelisters.ResourceClaimLister
	templates resourcelisters.ResourceClaimTemplateLister
	slices    cache.Indexer

	mu sync.Mutex
	// version counts the changes to each node's slices, so a view built
	// before a slice came or went is rebuilt (Cache).
	version map[string]int64
}

const sliceNodeIndex = "schedloop.io/node"

// NewDRA reads through informers of f, which the caller starts. The
// scheduler's DynamicResources plugin watches claims and slices through
// the same factory, so they cost no second watch.
func NewDRA(f informers.SharedInformerFactory) (*DRA, error) {
	r := f.Resource().V1()
	slices := r.ResourceSlices().Informer()
	err := slices.AddIndexers(cache.Indexers{sliceNodeIndex: func(obj any) ([]string, error) {
		if s, ok := obj.(*resourcev1.ResourceSlice); ok && s.Spec.NodeName != nil {
			return []string{*s.Spec.NodeName}, nil
		}
		return nil, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("index ResourceSlices by node: %w", err)
	}
	d := &DRA{claims: r.ResourceClaims().Lister(), templates: r.ResourceClaimTemplates().Lister(), slices: slices.GetIndexer(), version: map[string]int64{}}
	bump := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if s, ok := obj.(*resourcev1.ResourceSlice); ok && s.Spec.NodeName != nil {
			d.mu.Lock()
			d.version[*s.Spec.NodeName]++
			d.mu.Unlock()
		}
	}
	if _, err := slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: bump, UpdateFunc: func(_, obj any) { bump(obj) }, DeleteFunc: bump,
	}); err != nil {
		return nil, fmt.Errorf("watch ResourceSlices: %w", err)
	}
	return d, nil
}

// Version counts the changes seen to node's ResourceSlices; 0 for a nil DRA.
func (d *DRA) Version(node string) int64 {
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.version[node]
}

// ClaimSpec implements podspec.ClaimSpecs.
func (d *DRA) ClaimSpec(namespace, name string) (*resourcev1.ResourceClaimSpec, bool) {
	if d == nil {
		return nil, false
	}
	c, err := d.claims.ResourceClaims(namespace).Get(name)
	if err != nil {
		return nil, false
	}
	return &c.Spec, true
}

// TemplateSpec implements podspec.ClaimSpecs.
func (d *DRA) TemplateSpec(namespace, name string) (*resourcev1.ResourceClaimSpec, bool) {
	if d == nil {
		return nil, false
	}
	t, err := d.templates.ResourceClaimTemplates(namespace).Get(name)
	if err != nil {
		return nil, false
	}
	return &t.Spec.Spec, true
}

// Clique is the NVLink clique node's published GPUs belong to (the first
// the slices name), "" when none is published.
func (d *DRA) Clique(node string) string {
	for _, dev := range d.devices(node) {
		if dev.Clique != "" {
			return dev.Clique
		}
	}
	return ""
}

// NodeGPUs is how many whole NVIDIA GPUs node publishes in ResourceSlices.
func (d *DRA) NodeGPUs(node string) int {
	n := 0
	for _, dev := range d.devices(node) {
		if dev.GPU() {
			n++
		}
	}
	return n
}

// NodeMIG is the MIG instances node publishes in ResourceSlices, by
// profile; nil when it publishes none. An instance whose profile is not
// published cannot be matched to a request by profile and is left out.
func (d *DRA) NodeMIG(node string) map[string]int {
	var out map[string]int
	for _, dev := range d.devices(node) {
		if dev.MIG() && dev.Profile != "" {
			if out == nil {
				out = map[string]int{}
			}
			out[dev.Profile]++
		}
	}
	return out
}

// devices are the NVIDIA driver's devices node publishes.
func (d *DRA) devices(node string) []dra.Device {
	if d == nil {
		return nil
	}
	objs, err := d.slices.ByIndex(sliceNodeIndex, node)
	if err != nil || len(objs) == 0 {
		return nil
	}
	slices := make([]*resourcev1.ResourceSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*resourcev1.ResourceSlice); ok && s.Spec.Driver == dra.Driver {
			slices = append(slices, s)
		}
	}
	return dra.NewInventory(slices).Node(node)
}
