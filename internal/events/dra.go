package events

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

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

// DRAStore is the part of Store that keeps every device the slices publish
// and every ResourceClaim's lifecycle. A Store without it stores neither.
type DRAStore interface {
	ReplaceDRADevices(ctx context.Context, devices []schedloop.DRADevice, at time.Time) error
	UpsertResourceClaims(ctx context.Context, claims []schedloop.ResourceClaim) error
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
	// inv is the slices' devices, read again after a slice changes.
	inv *dra.Inventory
	// life is what was seen of each claim, by UID; dirty are the claims
	// to write, the last seen of each (deleted: gone from the API).
	life  map[string]*claimLife
	dirty map[string]dirtyClaim
}

type dirtyClaim struct {
	claim   *resourcev1.ResourceClaim
	deleted bool
}

// claimLife is when a claim was first seen in each state, and what of its
// devices was learnt while it held them: a device's UUID once read, and
// the devices that left their slices meanwhile.
type claimLife struct {
	seen  map[schedloop.ClaimState]time.Time
	uuids map[dra.Key]string
	lost  map[dra.Key]bool
	held  []dra.Allocated // the last allocation seen
}

func newDRAState() draState {
	return draState{slices: map[string]*resourcev1.ResourceSlice{}, claims: map[string]*resourcev1.ResourceClaim{},
		uuids: map[string][]string{}, life: map[string]*claimLife{}, dirty: map[string]dirtyClaim{}}
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
	w.dra.inv = nil
	for _, c := range w.dra.claims {
		// Their devices may have come or gone.
		if c.Status.Allocation != nil {
			w.dra.dirty[string(c.UID)] = dirtyClaim{claim: c}
		}
	}
	for uid, p := range w.podsBy {
		if len(p.Status.ResourceClaimStatuses) > 0 || hasNamedClaim(p) {
			w.pods[uid] = p
		}
	}
}

// claimChanged records a claim and marks the pods it is reserved for.
func (w *Watcher) claimChanged(c *resourcev1.ResourceClaim, deleted bool) {
	key := c.Namespace + "/" + c.Name
	w.dra.dirty[string(c.UID)] = dirtyClaim{claim: c, deleted: deleted}
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

// gpuUUIDs is the UUIDs of the whole GPUs and MIG instances (their MIG-
// UUIDs) pod's allocated claims hold, joined with those read before (draState.uuids), in order. inv is the
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
			if d, ok := inv.Device(a.Key); ok && (d.GPU() || d.MIG()) && d.UUID != "" && !slices.Contains(got, d.UUID) {
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
	if w.dra.inv == nil {
		all := make([]*resourcev1.ResourceSlice, 0, len(w.dra.slices))
		for _, s := range w.dra.slices {
			all = append(all, s)
		}
		w.dra.inv = dra.NewInventory(all)
	}
	return w.dra.inv
}

// draDevices is every device inv holds, as stored.
func draDevices(inv *dra.Inventory) []schedloop.DRADevice {
	var out []schedloop.DRADevice
	for _, d := range inv.All() {
		out = append(out, schedloop.DRADevice{Driver: d.Driver, Pool: d.Pool, Device: d.Name, Node: d.Node, Type: d.Type,
			UUID: d.UUID, ParentUUID: d.ParentUUID, Product: d.Product, Profile: d.Profile, Clique: d.Clique,
			MemoryBytes: d.MemoryBytes, Unknown: d.Unknown, Problems: d.Problems})
	}
	return out
}

// claimRow is the stored form of claim as last seen at now (deleted: gone
// from the API), with what its life so far adds; inv is the slices' devices.
func (w *Watcher) claimRow(claim *resourcev1.ResourceClaim, deleted bool, now time.Time, inv *dra.Inventory) schedloop.ResourceClaim {
	uid := string(claim.UID)
	l := w.dra.life[uid]
	if l == nil {
		l = &claimLife{seen: map[schedloop.ClaimState]time.Time{}, uuids: map[dra.Key]string{}, lost: map[dra.Key]bool{}}
		w.dra.life[uid] = l
	}
	state := schedloop.ClaimPending
	switch {
	case deleted:
		state = schedloop.ClaimDeleted
	case claim.Status.Allocation != nil && len(claim.Status.ReservedFor) > 0:
		state = schedloop.ClaimReserved
	case claim.Status.Allocation != nil:
		state = schedloop.ClaimAllocated
	case !l.seen[schedloop.ClaimAllocated].IsZero() || !l.seen[schedloop.ClaimReserved].IsZero():
		state = schedloop.ClaimDeallocated
	}
	if _, ok := l.seen[state]; !ok {
		l.seen[state] = now
	}
	if state == schedloop.ClaimReserved {
		// Reserved is allocated too.
		if _, ok := l.seen[schedloop.ClaimAllocated]; !ok {
			l.seen[schedloop.ClaimAllocated] = now
		}
	}
	if a := dra.AllocatedDevices(claim); len(a) > 0 && !deleted {
		if !slices.Equal(a, l.held) {
			// A new allocation: what was learnt of the old one is no more.
			l.held, l.uuids, l.lost = a, map[dra.Key]string{}, map[dra.Key]bool{}
			delete(l.seen, schedloop.ClaimDeallocated)
		}
	}
	row := schedloop.ResourceClaim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, State: state,
		CreatedAt:   w.clock.refine(claim.CreationTimestamp.Time, l.seen[schedloop.ClaimPending]),
		AllocatedAt: w.clock.at(l.seen[schedloop.ClaimAllocated]), ReservedAt: w.clock.at(l.seen[schedloop.ClaimReserved]),
		DeallocatedAt: w.clock.at(l.seen[schedloop.ClaimDeallocated]), DeletedAt: w.clock.at(l.seen[schedloop.ClaimDeleted])}
	if row.CreatedAt.IsZero() {
		row.CreatedAt = w.clock.at(now)
	}
	// A request without a count (allocationMode All) counts nothing.
	r, _ := dra.Request(&claim.Spec)
	row.GPUs, row.MIGInstances = r.GPUs, r.MIG
	for _, ref := range claim.Status.ReservedFor {
		if ref.Resource == "pods" {
			row.ReservedFor = append(row.ReservedFor, string(ref.UID))
		}
	}
	allocated := claim.Status.Allocation != nil && !deleted
	for _, a := range l.held {
		row.Devices = append(row.Devices, a.Key.String())
		d, published := inv.Device(a.Key)
		if published && d.UUID != "" {
			l.uuids[a.Key] = d.UUID
		}
		if published && row.Node == "" {
			row.Node = d.Node
		}
		if !published && allocated {
			l.lost[a.Key] = true
		}
		if u := l.uuids[a.Key]; u != "" {
			row.DeviceUUIDs = append(row.DeviceUUIDs, u)
		}
		if l.lost[a.Key] {
			row.LostDevices = append(row.LostDevices, a.Key.String())
		}
	}
	if deleted {
		delete(w.dra.life, uid)
	}
	return row
}

// draGPUs is the GPUs inv publishes on the nodes in known, as stored GPUs:
// a GPU's row needs its node's. Its index is the minor number NVIDIA's
// driver names the device by (gpu-<minor>, and gpu-<minor>-mig-... for its
// instances). A GPU partitioned into MIG instances is published only as
// its instances: it is stored once, under the parentUUID they name, with
// the model and clique they carry, so its instances' telemetry, stored per
// GPU instance under that UUID, has its GPU in the inventory. The
// instances themselves are stored by MIG UUID with the slices' devices
// (store.ReplaceDRADevices), since the driver publishes no GPU instance
// id to list them here by.
func draGPUs(inv *dra.Inventory, known map[string]bool) []schedloop.GPU {
	var out []schedloop.GPU
	nodes := make([]string, 0, len(known))
	for n := range known {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		seen := map[string]bool{}
		var parents []schedloop.GPU
		for _, d := range inv.Node(n) {
			switch {
			case d.GPU() && d.UUID != "":
				seen[d.UUID] = true
				out = append(out, schedloop.GPU{UUID: d.UUID, Node: n, Index: minorOf(d.Name), Model: d.Product, NVLinkDomain: d.Clique})
			case d.MIG() && d.ParentUUID != "" && !seen[d.ParentUUID]:
				seen[d.ParentUUID] = true
				parents = append(parents, schedloop.GPU{UUID: d.ParentUUID, Node: n, Index: minorOf(d.Name), Model: d.Product, NVLinkDomain: d.Clique})
			}
		}
		for _, p := range parents {
			if !slices.ContainsFunc(out, func(g schedloop.GPU) bool { return g.UUID == p.UUID }) {
				out = append(out, p)
			}
		}
	}
	return out
}

// minorOf is the GPU minor number a device name of NVIDIA's driver starts
// with (gpu-<minor>...), 0 when it starts with none.
func minorOf(name string) int {
	digits, _, _ := strings.Cut(strings.TrimPrefix(name, "gpu-"), "-")
	idx, err := strconv.Atoi(digits)
	if err != nil || idx < 0 || !strings.HasPrefix(name, "gpu-") {
		return 0
	}
	return idx
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

// GPUOwners maps the UUID of each GPU and MIG instance a running pod holds
// through DRA to that pod, as the kubelet's pod-resources API maps
// device-plugin GPUs (dcgm.PodResources), so dcgm.Attribute gives telemetry
// of those devices their pod: an instance's samples, which name their GPU
// and GPU_I_ID, reach it through the source's MIG- UUID of that instance
// (dcgm.InstanceDevicer). A device counts while a claim reserved for the
// pod holds it and a slice still publishes it: a device that left its
// slice (lost, or its driver gone) is no longer the pod's, so samples under
// its UUID, should it come back elsewhere, are not given to the old
// holder. The pod's first container naming a claim stands for it: a
// claim's devices are not split among containers, and one owner per pod
// keeps the pod's GPU time counted once.
func (w *Watcher) GPUOwners(context.Context) (map[string][]dcgm.PodRef, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	owners := map[string][]dcgm.PodRef{}
	if len(w.dra.claims) == 0 {
		return owners, nil
	}
	inv := w.inventory()
	for _, c := range w.dra.claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.ReservedFor {
			p := w.podsBy[string(r.UID)]
			if r.Resource != "pods" || p == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			ref := dcgm.PodRef{Namespace: p.Namespace, Name: p.Name}
			for _, ctr := range p.Spec.Containers {
				if len(ctr.Resources.Claims) > 0 {
					ref.Container = ctr.Name
					break
				}
			}
			for _, a := range dra.AllocatedDevices(c) {
				if d, ok := inv.Device(a.Key); ok && (d.GPU() || d.MIG()) && d.UUID != "" && !slices.Contains(owners[d.UUID], ref) {
					owners[d.UUID] = append(owners[d.UUID], ref)
				}
			}
		}
	}
	for _, refs := range owners {
		slices.SortFunc(refs, func(a, b dcgm.PodRef) int {
			return strings.Compare(a.Namespace+"/"+a.Name+"/"+a.Container, b.Namespace+"/"+b.Name+"/"+b.Container)
		})
	}
	return owners, nil
}
