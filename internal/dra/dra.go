// Package dra is the one reading of NVIDIA GPUs as Dynamic Resource
// Allocation (resource.k8s.io/v1) publishes and hands them out: the names of
// NVIDIA's DRA driver, DeviceClasses and device attributes; the devices of a
// ResourceSlice; how many GPUs a ResourceClaim asks for; which devices an
// allocation result names. The harness's simulated driver publishes with
// these names, the scheduler plugins and the collector read with them, so a
// GPU handed out through DRA is counted the same everywhere.
//
// It holds no placement rule, no client code and no I/O.
package dra

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// Names NVIDIA's DRA driver for GPUs (NVIDIA/k8s-dra-driver-gpu, its
// gpu-kubelet-plugin and Helm chart) publishes under.
const (
	// Driver is the driver name in ResourceSlices and allocation results.
	Driver = "gpu.nvidia.com"
	// ClassGPU selects whole GPUs; ClassMIG selects MIG instances. The
	// driver's chart installs both, selecting on the "type" attribute.
	ClassGPU = "gpu.nvidia.com"
	ClassMIG = "mig.nvidia.com"

	// Attribute names, unqualified: the driver publishes them in its own
	// domain (device.attributes["gpu.nvidia.com"].productName in CEL).
	AttrType        = "type" // TypeGPU or TypeMIG
	AttrUUID        = "uuid"
	AttrParentUUID  = "parentUUID" // a MIG instance's GPU
	AttrProfile     = "profile"    // a MIG instance's profile, "1g.10gb"
	AttrProductName = "productName"
	AttrPCIeBusID   = "pcieBusID"
	// AttrClique is the NVLink clique a GPU belongs to: NVIDIA's fabric
	// manager reports it as "<cluster UUID>.<clique id>", the value GPU
	// feature discovery labels nodes with (nvidia.com/gpu.clique) and the
	// ComputeDomain driver groups nodes by. GPUs of one clique share an
	// NVLink domain.
	AttrClique = "cliqueID"

	// CapMemory is a device's memory capacity (bytes).
	CapMemory = "memory"

	TypeGPU = "gpu"
	TypeMIG = "mig"
)

// The standard attributes any driver may publish (k8s.io/dynamic-resource-
// allocation/deviceattribute), fully qualified.
const (
	AttrNUMANode = deviceattribute.StandardDeviceAttributeNUMANode
	AttrPCIeRoot = deviceattribute.StandardDeviceAttributePCIeRoot
)

// Device is one device of a ResourceSlice as schedloop reads it. Empty
// strings and a false HasNUMA mean the slice did not say; Unknown lists the
// attributes and capacities schedloop does not read, so an inventory can
// keep and count them.
type Device struct {
	Driver, Pool, Node, Name string
	Type                     string // TypeGPU, TypeMIG, another driver's word, or ""
	UUID, ParentUUID         string
	Product, Profile         string
	Clique, PCIeRoot         string
	NUMANode                 int64
	HasNUMA                  bool
	MemoryBytes              int64 // 0: not published
	Unknown                  []string
	// Problems says which attribute was missing or of the wrong kind,
	// naming it and the slice; the device is kept as far as it was read.
	Problems []string
}

// Key names a device the way an allocation result does.
func (d Device) Key() Key { return Key{Driver: d.Driver, Pool: d.Pool, Device: d.Name} }

// GPU reports whether d is a whole NVIDIA GPU.
func (d Device) GPU() bool { return d.Driver == Driver && d.Type == TypeGPU }

// MIG reports whether d is a MIG instance of an NVIDIA GPU. Its UUID is
// the instance's own MIG- UUID, the one NVML and DCGM name it by; the
// driver does not publish its GPU instance id.
func (d Device) MIG() bool { return d.Driver == Driver && d.Type == TypeMIG }

// Key identifies a device across slices: driver, pool and device name.
type Key struct{ Driver, Pool, Device string }

func (k Key) String() string { return k.Driver + "/" + k.Pool + "/" + k.Device }

// Devices reads the devices of slice. It never fails: a device with
// attributes of the wrong kind or missing is read as far as it can be, and
// problems says, per device, which field was missing or wrong, naming it
// and the value.
func Devices(slice *resourcev1.ResourceSlice) (devs []Device, problems []string) {
	node := slice.Spec.NodeName
	if node != nil && *node == "" {
		node = nil
	}
	for _, d := range slice.Spec.Devices {
		dev := Device{Driver: slice.Spec.Driver, Pool: slice.Spec.Pool.Name, Name: d.Name}
		if node != nil {
			dev.Node = *node
		}
		bad := func(format string, args ...any) {
			dev.Problems = append(dev.Problems, fmt.Sprintf("slice %s device %s: ", slice.Name, d.Name)+fmt.Sprintf(format, args...))
		}
		str := func(name resourcev1.QualifiedName, dst *string) {
			a, ok := d.Attributes[name]
			if !ok {
				return
			}
			if a.StringValue == nil {
				bad("attribute %s is not a string (%s)", name, attrValue(a))
				return
			}
			*dst = *a.StringValue
		}
		known := map[resourcev1.QualifiedName]bool{}
		for _, f := range []struct {
			name resourcev1.QualifiedName
			dst  *string
		}{
			{AttrType, &dev.Type}, {AttrUUID, &dev.UUID}, {AttrParentUUID, &dev.ParentUUID},
			{AttrProductName, &dev.Product}, {AttrProfile, &dev.Profile}, {AttrClique, &dev.Clique},
			{AttrPCIeRoot, &dev.PCIeRoot},
		} {
			known[f.name] = true
			str(f.name, f.dst)
		}
		known[AttrPCIeBusID] = true
		if a, ok := d.Attributes[AttrNUMANode]; ok {
			known[AttrNUMANode] = true
			if a.IntValue == nil {
				bad("attribute %s is not an integer (%s)", AttrNUMANode, attrValue(a))
			} else {
				dev.NUMANode, dev.HasNUMA = *a.IntValue, true
			}
		}
		for name := range d.Attributes {
			if !known[name] {
				dev.Unknown = append(dev.Unknown, string(name))
			}
		}
		for name, c := range d.Capacity {
			if name == CapMemory {
				dev.MemoryBytes = c.Value.Value()
				continue
			}
			dev.Unknown = append(dev.Unknown, string(name))
		}
		sort.Strings(dev.Unknown)
		if dev.Driver == Driver && (dev.Type == TypeGPU || dev.Type == TypeMIG) && dev.UUID == "" {
			bad("attribute %s missing", AttrUUID)
		}
		problems = append(problems, dev.Problems...)
		devs = append(devs, dev)
	}
	return devs, problems
}

// attrValue describes what an attribute holds, for a problem's text.
func attrValue(a resourcev1.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return fmt.Sprintf("string %q", *a.StringValue)
	case a.IntValue != nil:
		return fmt.Sprintf("int %d", *a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprintf("bool %t", *a.BoolValue)
	case a.VersionValue != nil:
		return fmt.Sprintf("version %q", *a.VersionValue)
	}
	return "no value"
}

// Inventory is every device of a set of ResourceSlices, by key. Slices of
// a pool's older generation are dropped, as the allocator drops them.
type Inventory struct {
	byKey    map[Key]Device
	byNode   map[string][]Key
	Problems []string
}

// NewInventory reads slices.
func NewInventory(slices []*resourcev1.ResourceSlice) *Inventory {
	inv := &Inventory{byKey: map[Key]Device{}, byNode: map[string][]Key{}}
	newest := map[[2]string]int64{}
	for _, s := range slices {
		p := [2]string{s.Spec.Driver, s.Spec.Pool.Name}
		newest[p] = max(newest[p], s.Spec.Pool.Generation)
	}
	for _, s := range slices {
		if s.Spec.Pool.Generation < newest[[2]string{s.Spec.Driver, s.Spec.Pool.Name}] {
			continue
		}
		devs, problems := Devices(s)
		inv.Problems = append(inv.Problems, problems...)
		for _, d := range devs {
			if _, dup := inv.byKey[d.Key()]; !dup && d.Node != "" {
				inv.byNode[d.Node] = append(inv.byNode[d.Node], d.Key())
			}
			inv.byKey[d.Key()] = d
		}
	}
	return inv
}

// Device is the device named k; ok is false when no slice publishes it.
func (inv *Inventory) Device(k Key) (Device, bool) {
	d, ok := inv.byKey[k]
	return d, ok
}

// Node is the devices published for node, ordered by name (gpu-10 after gpu-9).
func (inv *Inventory) Node(node string) []Device {
	out := make([]Device, 0, len(inv.byNode[node]))
	for _, k := range inv.byNode[node] {
		out = append(out, inv.byKey[k])
	}
	slices.SortFunc(out, func(a, b Device) int { return CompareNames(a.Name, b.Name) })
	return out
}

// GPUs is how many whole NVIDIA GPUs node's slices publish.
func (inv *Inventory) GPUs(node string) int {
	n := 0
	for _, k := range inv.byNode[node] {
		if inv.byKey[k].GPU() {
			n++
		}
	}
	return n
}

// All is every device the inventory holds, ordered by driver, pool and
// name.
func (inv *Inventory) All() []Device {
	out := make([]Device, 0, len(inv.byKey))
	for _, d := range inv.byKey {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Device) int {
		if c := strings.Compare(a.Driver, b.Driver); c != 0 {
			return c
		}
		if c := strings.Compare(a.Pool, b.Pool); c != 0 {
			return c
		}
		return CompareNames(a.Name, b.Name)
	})
	return out
}

// Len is how many devices the inventory holds.
func (inv *Inventory) Len() int { return len(inv.byKey) }

// CompareNames orders device names with their numbers read as numbers, so
// gpu-2 comes before gpu-10.
func CompareNames(a, b string) int {
	for a != "" && b != "" {
		ia, ib := digitsAt(a), digitsAt(b)
		if ia > 0 && ib > 0 {
			na, nb := strings.TrimLeft(a[:ia], "0"), strings.TrimLeft(b[:ib], "0")
			if c := len(na) - len(nb); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[ia:], b[ib:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digitsAt(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// ClaimRequest is what a ResourceClaim asks of NVIDIA's driver.
type ClaimRequest struct {
	// GPUs counts whole GPUs; MIG counts MIG instances, of any profile or
	// a named one.
	GPUs, MIG int
	// Profiles counts, by profile, those of MIG whose request names its
	// profile in a selector (SelectorProfile); the rest of MIG may be
	// served by an instance of any profile. Nil when no request names one.
	Profiles map[string]int
}

// profileSelector matches the one CEL form that names a MIG profile, as
// NVIDIA's driver documents it and the trace player writes it:
// device.attributes['gpu.nvidia.com'].profile == '1g.10gb', with either
// quote and the operands in either order. Quotes are checked to pair
// after the match (RE2 has no back-references).
var profileSelector = func() *regexp.Regexp {
	attr := `device\.attributes\[\s*(["'])gpu\.nvidia\.com(["'])\s*\]\.profile`
	value := `(["'])([0-9A-Za-z.+-]+)(["'])`
	return regexp.MustCompile(`^\s*(?:` + attr + `\s*==\s*` + value + `|` + value + `\s*==\s*` + attr + `)\s*$`)
}()

// SelectorProfile is the MIG profile sels require of a device, "" when
// none does. Only an expression of profileSelector's form is read; any
// other expression (a conjunction, a different attribute, a function
// call) names no profile, and the request counts as one for an instance
// of any profile, which is what the allocator may hand out as far as
// schedloop can tell. Selectors must all hold, so two naming different
// profiles can match no device: they name none either.
func SelectorProfile(sels []resourcev1.DeviceSelector) string {
	profile := ""
	for _, s := range sels {
		if s.CEL == nil {
			continue
		}
		m := profileSelector.FindStringSubmatch(s.CEL.Expression)
		if m == nil {
			continue
		}
		var p string
		switch {
		case m[1] != "" && m[1] == m[2] && m[3] == m[5]:
			p = m[4]
		case m[6] != "" && m[6] == m[8] && m[9] == m[10]:
			p = m[7]
		default:
			continue
		}
		if profile != "" && p != profile {
			return ""
		}
		profile = p
	}
	return profile
}

// Request reads what spec asks for. A request through another class
// counts nothing. A request with alternatives (firstAvailable) counts its
// first: the allocator tries them in order, so the first is what the pod
// asks for when it can be had, and what schedloop plans for. A request for
// all devices of a class (allocationMode All) has no count until it is
// allocated; the error names it, and the request counts nothing. A MIG
// request's profile is read from its selectors (SelectorProfile).
func Request(spec *resourcev1.ResourceClaimSpec) (ClaimRequest, error) {
	var r ClaimRequest
	var errs []string
	for _, req := range spec.Devices.Requests {
		var class string
		var mode resourcev1.DeviceAllocationMode
		var count int64
		var sels []resourcev1.DeviceSelector
		switch {
		case req.Exactly != nil:
			class, mode, count, sels = req.Exactly.DeviceClassName, req.Exactly.AllocationMode, req.Exactly.Count, req.Exactly.Selectors
		case len(req.FirstAvailable) > 0:
			sub := req.FirstAvailable[0]
			class, mode, count, sels = sub.DeviceClassName, sub.AllocationMode, sub.Count, sub.Selectors
		default:
			continue
		}
		if class != ClassGPU && class != ClassMIG {
			continue
		}
		switch mode {
		case resourcev1.DeviceAllocationModeExactCount, "":
			if count <= 0 {
				count = 1 // the API's default
			}
		default:
			errs = append(errs, fmt.Sprintf("request %s: allocationMode %s of class %s has no count before allocation", req.Name, mode, class))
			continue
		}
		if class == ClassGPU {
			r.GPUs += int(count)
		} else {
			r.MIG += int(count)
			if p := SelectorProfile(sels); p != "" {
				if r.Profiles == nil {
					r.Profiles = map[string]int{}
				}
				r.Profiles[p] += int(count)
			}
		}
	}
	if errs != nil {
		return r, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return r, nil
}

// Allocated is one device an allocation result hands to a claim.
type Allocated struct {
	Request string
	Key     Key
}

// AllocatedDevices lists the devices claim's allocation names, in order;
// none when the claim is not allocated.
func AllocatedDevices(claim *resourcev1.ResourceClaim) []Allocated {
	a := claim.Status.Allocation
	if a == nil {
		return nil
	}
	out := make([]Allocated, 0, len(a.Devices.Results))
	for _, r := range a.Devices.Results {
		out = append(out, Allocated{Request: r.Request, Key: Key{Driver: r.Driver, Pool: r.Pool, Device: r.Device}})
	}
	return out
}

// ReservedFor reports whether claim is reserved for the pod with uid.
func ReservedFor(claim *resourcev1.ResourceClaim, uid string) bool {
	for _, c := range claim.Status.ReservedFor {
		if c.Resource == "pods" && string(c.UID) == uid {
			return true
		}
	}
	return false
}
