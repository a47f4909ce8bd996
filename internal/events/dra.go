package events

import (
	"context"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/dra"
)

// GPUStore is the part of Store a watcher of DRA clusters also writes: the
// GPUs ResourceSlices publish. A Store without it stores no DRA inventory.
type GPUStore interface {
	UpsertGPUs(ctx context.Context, gpus []schedloop.GPU) error
}

// draState is what the watcher keeps of DRA objects: every ResourceSlice
// and ResourceClaim, and the GPU UUIDs each pod was found to hold. Called
// with w.mu held throughout.
type draState struct {
	slices map[string]*resourcev1.ResourceSlice // by name
	claims map[string]*resourcev1.ResourceClaim // by "namespace/name"
	// uuids are the GPUs each live pod's allocated claims named, kept once
	// read: a device gone from its slice (driver restart, GPU lost) while
	// the pod held it still was the pod's.
	uuids map[string][]string
	// inventoryDirty: the slices changed since the GPUs were last written.
	inventoryDirty bool
}

func newDRAState() draState {
	return draState{slices: map[string]*resourcev1.ResourceSlice{}, claims: map[string]*resourcev1.ResourceClaim{},
		uuids: map[string][]string{}}
}

// sliceChanged records a slice and marks the pods whose claims name
// devices not yet read for rewriting, as their UUIDs may now be known.
func (w *Watcher) sliceChanged(s *resourcev1.ResourceSlice, deleted bool) {
	if deleted {
		delete(w.dra.slices, s.Name)
	} else {
		w.dra.slices[s.Name] = s
	}
	w.dra.inventoryDirty = true
	for uid, p := range w.podsBy {
		if len(p.Status.ResourceClaimStatuses) > 0 || hasNamedClaim(p) {
			w.pods[uid] = p
		}
	}
}

// claimChanged records a claim and marks the pods it is reserved for.
func (w *Watcher) claimChanged(c *resourcev1.ResourceClaim, deleted bool) {
	key := c.Namespace + "/" + c.Name
	if deleted {
		delete(w.dra.claims, key)
		return
	}
	w.dra.claims[key] = c
	for _, r := range c.Status.ReservedFor {
		if r.Resource != "pods" {
			continue
		}
		if p := w.podsBy[string(r.UID)]; p != nil {
			w.pods[string(r.UID)] = p
		}
	}
}

func hasNamedClaim(p *corev1.Pod) bool {
	for _, c := range p.Spec.ResourceClaims {
		if c.ResourceClaimName != nil {
			return true
		}
	}
	return false
}

// podClaims names the claims pod uses: those named in its spec and those
// made for it from templates, as its status names them.
func podClaims(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Spec.ResourceClaims {
		if c.ResourceClaimName != nil {
			out = append(out, *c.ResourceClaimName)
		}
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			out = append(out, *s.ResourceClaimName)
		}
	}
	return out
}

// gpuUUIDs is the UUIDs of the whole GPUs pod's allocated claims hold,
// joined with those read before (draState.uuids), in order. inv is the
// current slices' inventory.
func (w *Watcher) gpuUUIDs(pod *corev1.Pod, inv *dra.Inventory) []string {
	uid := string(pod.UID)
	got := slices.Clone(w.dra.uuids[uid])
	for _, name := range podClaims(pod) {
		c := w.dra.claims[pod.Namespace+"/"+name]
		if c == nil || !dra.ReservedFor(c, uid) {
			continue
		}
		for _, a := range dra.AllocatedDevices(c) {
			if d, ok := inv.Device(a.Key); ok && d.GPU() && d.UUID != "" && !slices.Contains(got, d.UUID) {
				got = append(got, d.UUID)
			}
		}
	}
	if len(got) > 0 {
		w.dra.uuids[uid] = got
	}
	return got
}

// inventory is the current slices' devices.
func (w *Watcher) inventory() *dra.Inventory {
	all := make([]*resourcev1.ResourceSlice, 0, len(w.dra.slices))
	for _, s := range w.dra.slices {
		all = append(all, s)
	}
	return dra.NewInventory(all)
}

// draGPUs is the whole GPUs inv publishes on the nodes in known, as
// stored GPUs: a GPU's row needs its node's. Its index is the minor number
// NVIDIA's driver names the device by (gpu-<minor>).
func draGPUs(inv *dra.Inventory, known map[string]bool) []schedloop.GPU {
	var out []schedloop.GPU
	nodes := make([]string, 0, len(known))
	for n := range known {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		for _, d := range inv.Node(n) {
			if !d.GPU() || d.UUID == "" {
				continue
			}
			idx, err := strconv.Atoi(strings.TrimPrefix(d.Name, "gpu-"))
			if err != nil || idx < 0 {
				idx = 0
			}
			out = append(out, schedloop.GPU{UUID: d.UUID, Node: n, Index: idx, Model: d.Product, NVLinkDomain: d.Clique})
		}
	}
	return out
}

// draServed reports whether the server serves resource.k8s.io/v1's
// ResourceSlices; without them there is no DRA to follow.
func (w *Watcher) draServed() bool {
	res, err := w.opts.Client.Discovery().ServerResourcesForGroupVersion(resourcev1.SchemeGroupVersion.String())
	if err != nil {
		return false
	}
	for _, r := range res.APIResources {
		if r.Name == "resourceslices" {
			return true
		}
	}
	return false
}

// GPUOwners maps the UUID of each GPU a running pod holds through DRA to
// that pod, as the kubelet's pod-resources API maps device-plugin GPUs
// (dcgm.PodResources), so dcgm.Attribute gives telemetry of those GPUs
// their pod. The pod's first container naming a claim stands for it: a
// claim's devices are not split among containers, and one owner per pod
// keeps the pod's GPU time counted once.
func (w *Watcher) GPUOwners(context.Context) (map[string][]dcgm.PodRef, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	owners := map[string][]dcgm.PodRef{}
	for uid, uuids := range w.dra.uuids {
		p := w.podsBy[uid]
		if p == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		ref := dcgm.PodRef{Namespace: p.Namespace, Name: p.Name}
		for _, c := range p.Spec.Containers {
			if len(c.Resources.Claims) > 0 {
				ref.Container = c.Name
				break
			}
		}
		for _, u := range uuids {
			owners[u] = append(owners[u], ref)
		}
	}
	return owners, nil
}
