package events

import (
	"fmt"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/dra"
)

// A GPU partitioned into MIG instances is published only as its
// instances; the inventory stores it once, under the parentUUID they name,
// beside the whole GPUs, and a node the watcher does not know yet is left
// out.
func TestDRAGPUsKeepPartitionedGPUs(t *testing.T) {
	str := func(v string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: ptr.To(v)} }
	dev := func(name, typ, uuid, parent, profile string) resourcev1.Device {
		d := resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			dra.AttrType: str(typ), dra.AttrUUID: str(uuid), dra.AttrProductName: str("NVIDIA A100-SXM4-80GB"), dra.AttrClique: str("c.1")}}
		if parent != "" {
			d.Attributes[dra.AttrParentUUID] = str(parent)
			d.Attributes[dra.AttrProfile] = str(profile)
		}
		return d
	}
	slice := func(node string, devs ...resourcev1.Device) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{Driver: dra.Driver, NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1}, Devices: devs}}
	}
	inv := dra.NewInventory([]*resourcev1.ResourceSlice{
		slice("a",
			dev("gpu-0", dra.TypeGPU, "GPU-0", "", ""),
			dev("gpu-1-mig-1g10gb-7", dra.TypeMIG, "MIG-1", "GPU-1", "1g.10gb"),
			dev("gpu-1-mig-1g10gb-8", dra.TypeMIG, "MIG-2", "GPU-1", "1g.10gb"),
			dev("gpu-2-mig-3g40gb-1", dra.TypeMIG, "MIG-3", "GPU-2", "3g.40gb"),
			dev("gpu-3-mig-1g10gb-9", dra.TypeMIG, "MIG-4", "", ""),
		),
		slice("unknown-node", dev("gpu-0-mig-1g10gb-1", dra.TypeMIG, "MIG-9", "GPU-9", "1g.10gb")),
	})
	got := draGPUs(inv, map[string]bool{"a": true})
	want := []schedloop.GPU{
		{UUID: "GPU-0", Node: "a", Index: 0, Model: "NVIDIA A100-SXM4-80GB", NVLinkDomain: "c.1"},
		{UUID: "GPU-1", Node: "a", Index: 1, Model: "NVIDIA A100-SXM4-80GB", NVLinkDomain: "c.1"},
		{UUID: "GPU-2", Node: "a", Index: 2, Model: "NVIDIA A100-SXM4-80GB", NVLinkDomain: "c.1"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}
