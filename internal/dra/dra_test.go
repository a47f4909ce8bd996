package dra

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func readSlice(t testing.TB, path string) *resourcev1.ResourceSlice {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s resourcev1.ResourceSlice
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &s
}

func TestDevicesOfDriverSlice(t *testing.T) {
	s := readSlice(t, "testdata/slice-gpu.yaml")
	devs, problems := Devices(s)
	if len(problems) != 0 {
		t.Errorf("problems: %v", problems)
	}
	if len(devs) != 2 {
		t.Fatalf("%d devices, want 2", len(devs))
	}
	d := devs[0]
	want := Device{Driver: Driver, Pool: "node-a", Node: "node-a", Name: "gpu-0", Type: TypeGPU,
		UUID: "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", Product: "NVIDIA A100-SXM4-40GB",
		PCIeRoot: "pci0000:00", MemoryBytes: 40 << 30,
		Unknown: []string{"addressingMode", "architecture", "brand", "cudaComputeCapability", "cudaDriverVersion", "driverVersion"}}
	if !equalDevice(d, want) {
		t.Errorf("gpu-0 read as\n%+v\nwant\n%+v", d, want)
	}
	if devs[1].Type != TypeMIG || devs[1].ParentUUID != d.UUID || devs[1].Profile != "1g.5gb" {
		t.Errorf("MIG device read as %+v", devs[1])
	}
}

func equalDevice(a, b Device) bool { return cmp.Equal(a, b) }

// TestDevicesBadAttributes: a device with attributes missing or of the
// wrong kind is read as far as it goes, and each fault is named.
func TestDevicesBadAttributes(t *testing.T) {
	s := &resourcev1.ResourceSlice{}
	s.Name = "bad"
	s.Spec.Driver, s.Spec.Pool.Name, s.Spec.NodeName = Driver, "n", ptr.To("n")
	s.Spec.Devices = []resourcev1.Device{
		{Name: "gpu-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			AttrType:                   {StringValue: ptr.To(TypeGPU)},
			AttrNUMANode:               {StringValue: ptr.To("zero")},
			"vendor.example.com/thing": {BoolValue: ptr.To(true)},
		}},
		{Name: "gpu-1", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			AttrType: {StringValue: ptr.To(TypeGPU)}, AttrUUID: {IntValue: ptr.To[int64](7)},
		}},
		{Name: "nic-0"},
	}
	devs, problems := Devices(s)
	if len(devs) != 3 {
		t.Fatalf("%d devices, want all 3 kept", len(devs))
	}
	want := []string{
		"slice bad device gpu-0: attribute resource.kubernetes.io/numaNode is not an integer (string \"zero\")",
		"slice bad device gpu-0: attribute uuid missing",
		"slice bad device gpu-1: attribute uuid is not a string (int 7)",
		"slice bad device gpu-1: attribute uuid missing",
	}
	if !slices.Equal(problems, want) {
		t.Errorf("problems\n%s\nwant\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	if got := append(slices.Clone(devs[0].Problems), devs[1].Problems...); !slices.Equal(got, want) {
		t.Errorf("the devices' own problems %v, want %v", got, want)
	}
	if !slices.Equal(devs[0].Unknown, []string{"vendor.example.com/thing"}) || devs[0].HasNUMA {
		t.Errorf("gpu-0 %+v", devs[0])
	}
	inv := NewInventory([]*resourcev1.ResourceSlice{s})
	if inv.GPUs("n") != 2 || inv.Len() != 3 || len(inv.Problems) != 4 {
		t.Errorf("inventory: %d GPUs, %d devices, %d problems", inv.GPUs("n"), inv.Len(), len(inv.Problems))
	}
}

// TestInventoryDropsOldGeneration: a pool republished under a newer
// generation replaces its older slices, as the allocator reads them.
func TestInventoryDropsOldGeneration(t *testing.T) {
	mk := func(name string, gen int64, devices ...string) *resourcev1.ResourceSlice {
		s := &resourcev1.ResourceSlice{}
		s.Name = name
		s.Spec.Driver, s.Spec.Pool.Name, s.Spec.Pool.Generation, s.Spec.NodeName = Driver, "n", gen, ptr.To("n")
		for _, d := range devices {
			s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: d, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				AttrType: {StringValue: ptr.To(TypeGPU)}, AttrUUID: {StringValue: ptr.To("GPU-" + d)}}})
		}
		return s
	}
	inv := NewInventory([]*resourcev1.ResourceSlice{mk("old", 1, "gpu-0", "gpu-1", "gpu-2"), mk("new", 2, "gpu-0", "gpu-10", "gpu-9")})
	var names []string
	for _, d := range inv.Node("n") {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, []string{"gpu-0", "gpu-9", "gpu-10"}) {
		t.Errorf("devices %v", names)
	}
	if _, ok := inv.Device(Key{Driver, "n", "gpu-1"}); ok {
		t.Error("gpu-1 of the old generation kept")
	}
}

func TestRequest(t *testing.T) {
	exact := func(name, class string, mode resourcev1.DeviceAllocationMode, n int64, cel ...string) resourcev1.DeviceRequest {
		r := resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: mode, Count: n}}
		for _, e := range cel {
			r.Exactly.Selectors = append(r.Exactly.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: e}})
		}
		return r
	}
	const sel3g = `device.attributes["gpu.nvidia.com"].profile == "3g.20gb"`
	for _, tc := range []struct {
		name string
		reqs []resourcev1.DeviceRequest
		want ClaimRequest
		err  string
	}{
		{"whole GPUs", []resourcev1.DeviceRequest{exact("g", ClassGPU, resourcev1.DeviceAllocationModeExactCount, 4)}, ClaimRequest{GPUs: 4}, ""},
		{"count defaults to one", []resourcev1.DeviceRequest{exact("g", ClassGPU, "", 0)}, ClaimRequest{GPUs: 1}, ""},
		{"MIG and GPUs", []resourcev1.DeviceRequest{exact("g", ClassGPU, "", 2), exact("m", ClassMIG, "", 3)}, ClaimRequest{GPUs: 2, MIG: 3}, ""},
		{"other class", []resourcev1.DeviceRequest{exact("nic", "rdma.example.com", "", 2)}, ClaimRequest{}, ""},
		{"MIG by profile", []resourcev1.DeviceRequest{exact("m", ClassMIG, "", 2, sel3g), exact("n", ClassMIG, "", 1)},
			ClaimRequest{MIG: 3, Profiles: map[string]int{"3g.20gb": 2}}, ""},
		{"MIG profile beside an unread selector", []resourcev1.DeviceRequest{exact("m", ClassMIG, "", 1, `device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA A100")`, sel3g)},
			ClaimRequest{MIG: 1, Profiles: map[string]int{"3g.20gb": 1}}, ""},
		{"MIG with contradicting profiles", []resourcev1.DeviceRequest{exact("m", ClassMIG, "", 1, sel3g, `device.attributes["gpu.nvidia.com"].profile == "1g.5gb"`)},
			ClaimRequest{MIG: 1}, ""},
		{"profile of a GPU request", []resourcev1.DeviceRequest{exact("g", ClassGPU, "", 1, sel3g)}, ClaimRequest{GPUs: 1}, ""},
		{"first available by profile", []resourcev1.DeviceRequest{{Name: "m", FirstAvailable: []resourcev1.DeviceSubRequest{
			{Name: "big", DeviceClassName: ClassMIG, Count: 1, Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: sel3g}}}},
			{Name: "small", DeviceClassName: ClassMIG, Count: 3}}}}, ClaimRequest{MIG: 1, Profiles: map[string]int{"3g.20gb": 1}}, ""},
		{"first available counts the first", []resourcev1.DeviceRequest{{Name: "g", FirstAvailable: []resourcev1.DeviceSubRequest{
			{Name: "big", DeviceClassName: ClassGPU, Count: 8}, {Name: "small", DeviceClassName: ClassGPU, Count: 4}}}}, ClaimRequest{GPUs: 8}, ""},
		{"all", []resourcev1.DeviceRequest{exact("g", ClassGPU, resourcev1.DeviceAllocationModeAll, 0), exact("m", ClassMIG, "", 1)}, ClaimRequest{MIG: 1},
			"request g: allocationMode All of class gpu.nvidia.com has no count before allocation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Request(&resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: tc.reqs}})
			if !cmp.Equal(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
}

// TestSelectorProfile reads each expression of testdata/selectors.txt as
// a lone selector and compares the profiles named with
// testdata/selectors.golden (-update rewrites it).
func TestSelectorProfile(t *testing.T) {
	in, err := os.ReadFile("testdata/selectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range strings.Split(strings.TrimRight(string(in), "\n"), "\n") {
		p := SelectorProfile([]resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: e}}})
		fmt.Fprintf(&b, "%q\t%q\n", p, e)
	}
	const golden = "testdata/selectors.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), b.String()); d != "" {
		t.Errorf("profiles differ from %s (-want +got):\n%s", golden, d)
	}
}

func TestCompareNames(t *testing.T) {
	names := []string{"gpu-10", "gpu-2", "gpu-1-mig-1g10gb-3-1", "gpu-1", "gpu-01x", "a"}
	slices.SortFunc(names, CompareNames)
	want := []string{"a", "gpu-1", "gpu-1-mig-1g10gb-3-1", "gpu-01x", "gpu-2", "gpu-10"}
	if !slices.Equal(names, want) {
		t.Errorf("sorted %v, want %v", names, want)
	}
}

// FuzzDevices: any slice the API could carry is read without a panic, and
// every device it lists is kept.
func FuzzDevices(f *testing.F) {
	b, err := os.ReadFile("testdata/slice-gpu.yaml")
	if err != nil {
		f.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(j)
	f.Add([]byte(`{"spec":{"devices":[{"name":"x","attributes":{"uuid":{},"resource.kubernetes.io/numaNode":{"string":"a"}},"capacity":{"memory":{"value":"-1"}}}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s resourcev1.ResourceSlice
		if json.Unmarshal(data, &s) != nil {
			return
		}
		devs, _ := Devices(&s)
		if len(devs) != len(s.Spec.Devices) {
			t.Fatalf("%d devices read of %d", len(devs), len(s.Spec.Devices))
		}
		NewInventory([]*resourcev1.ResourceSlice{&s})
	})
}

// FuzzSelectorProfile: any expression is read without a panic, and a
// profile it names appears in it.
func FuzzSelectorProfile(f *testing.F) {
	in, err := os.ReadFile("testdata/selectors.txt")
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range strings.Split(string(in), "\n") {
		f.Add(e)
	}
	f.Fuzz(func(t *testing.T, e string) {
		p := SelectorProfile([]resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: e}}, {}})
		if p != "" && !strings.Contains(e, p) {
			t.Fatalf("profile %q not in %q", p, e)
		}
	})
}
