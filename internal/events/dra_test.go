package events_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/dra"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/trace"
)

// TestWatchDRAClaimsAndSlices runs a pod whose GPU the stock scheduler
// allocates through a claim template on a DRA node: the stored pod holds
// the UUID its slice publishes for the allocated device, the stored GPU
// inventory lists the slice's GPUs, and the claim is stored reserved for
// the pod with its device. The device vanishing from its slice while
// allocated leaves the pod's UUID stored but ends the pod's attribution,
// and the claim names the device lost; the pod's end releases the claim
// and its deletion follows, each stored with the devices it held. A slice of devices
// with unknown or faulty attributes is stored device by device.
func TestWatchDRAClaimsAndSlices(t *testing.T) {
	c := harness.NewForTest(t, harness.Options{})
	ctx := t.Context()
	clock, err := harness.NewClock(60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddNodes(ctx, []trace.Node{{Name: "n0", GPUs: 2, GPUModel: "NVIDIA-H100-80GB-HBM3"}},
		harness.NodeOptions{Clock: clock, DRA: true, NoExporters: true}); err != nil {
		t.Fatal(err)
	}
	w, s := events.NewTestWatcher(t, c, events.WatchOptions{FlushInterval: 50 * time.Millisecond})
	defer runWatcher(ctx, t, w)()
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{}); err != nil {
		t.Fatal(err)
	}
	rc := c.Client.ResourceV1()
	tpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: "default"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: dra.ClassGPU, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}},
		}}},
	}
	if _, err := rc.ResourceClaimTemplates("default").Create(ctx, tpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := c.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer"},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("one-gpu")}},
			Containers: []corev1.Container{{Name: "main", Image: "train:1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	sl, err := rc.ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ptrs []*resourcev1.ResourceSlice
	for i := range sl.Items {
		ptrs = append(ptrs, &sl.Items[i])
	}
	inv := dra.NewInventory(ptrs)
	published := map[string]bool{}
	for _, d := range inv.Node("n0") {
		if d.GPU() {
			published[d.UUID] = true
		}
	}
	if len(published) != 2 {
		t.Fatalf("n0 publishes GPUs %v, want 2", published)
	}

	var uuids []string
	waitFor(t, "the pod's GPU stored", func(ctx context.Context) (bool, error) {
		p, err := s.GetPod(ctx, string(pod.UID))
		uuids = p.GPUUUIDs
		return err == nil && len(uuids) > 0, nil
	})
	claims, err := rc.ResourceClaims("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) != 1 {
		t.Fatalf("claims %v: %v", claims, err)
	}
	alloc := dra.AllocatedDevices(&claims.Items[0])
	if len(alloc) != 1 {
		t.Fatalf("allocation %+v", alloc)
	}
	d, _ := inv.Device(alloc[0].Key)
	if !slices.Equal(uuids, []string{d.UUID}) || !published[d.UUID] {
		t.Errorf("stored pod GPUs %v; its claim was allocated %s, UUID %q", uuids, alloc[0].Key, d.UUID)
	}
	owners, err := w.GPUOwners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := dcgm.Attribute([]schedloop.GPUSample{{GPUUUID: d.UUID, Node: "n0"}}, owners, nil)
	if len(got) != 1 || got[0].PodNamespace != "default" || got[0].PodName != "trainer" || got[0].Container != "main" {
		t.Errorf("a sample of the pod's GPU is attributed as %+v; owners %v", got, owners)
	}
	waitFor(t, "the slices' GPUs stored", func(ctx context.Context) (bool, error) {
		gpus, err := s.ListGPUs(ctx, "n0")
		if err != nil {
			return false, err
		}
		got := map[string]bool{}
		for _, g := range gpus {
			if g.Model != "NVIDIA H100 80GB HBM3" {
				t.Errorf("stored GPU %+v: model from the slice's productName wanted", g)
			}
			got[g.UUID] = true
		}
		return len(got) == len(published) && len(gpus) == len(published), nil
	})

	// The allocated device vanishes from its slice.
	before := sliceNotes(w)
	for i := range sl.Items {
		sc := sl.Items[i].DeepCopy()
		n := len(sc.Spec.Devices)
		sc.Spec.Devices = slices.DeleteFunc(sc.Spec.Devices, func(dev resourcev1.Device) bool { return dev.Name == alloc[0].Key.Device })
		if len(sc.Spec.Devices) == n {
			continue
		}
		if _, err := rc.ResourceSlices().Update(ctx, sc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the watcher to see the smaller slice", func(ctx context.Context) (bool, error) {
		return sliceNotes(w) > before, nil
	})
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := s.GetPod(ctx, string(pod.UID))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.GPUUUIDs, uuids) {
		t.Errorf("after its device left the slice the pod holds %v, want %v", p.GPUUUIDs, uuids)
	}
	if owners, err := w.GPUOwners(ctx); err != nil || len(owners[d.UUID]) != 0 {
		t.Errorf("after its device left the slice, GPU owners %v (%v); the pod's attribution must end", owners, err)
	}
	claimRow := func() schedloop.ResourceClaim {
		t.Helper()
		rows, err := s.ResourceClaims(ctx, "default")
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 {
			t.Fatalf("stored claims %+v, want the pod's one", rows)
		}
		return rows[0]
	}
	key := alloc[0].Key.String()
	stored := claimRow()
	if stored.UID != string(claims.Items[0].UID) || stored.State != schedloop.ClaimReserved || stored.Node != "n0" || stored.GPUs != 1 ||
		!slices.Equal(stored.ReservedFor, []string{string(pod.UID)}) || !slices.Equal(stored.Devices, []string{key}) ||
		!slices.Equal(stored.DeviceUUIDs, []string{d.UUID}) || !slices.Equal(stored.LostDevices, []string{key}) ||
		stored.AllocatedAt.IsZero() || stored.ReservedAt.IsZero() || stored.AllocatedAt.After(stored.ReservedAt) || stored.CreatedAt.After(stored.AllocatedAt) {
		t.Errorf("stored claim %+v; want reserved for pod %s on n0 with 1 GPU, device %s (UUID %s) lost", stored, pod.UID, key, d.UUID)
	}
	devs, gone, err := s.DRADevices(ctx, "n0")
	if err != nil {
		t.Fatal(err)
	}
	for i, dev := range devs {
		if lost := dev.Driver+"/"+dev.Pool+"/"+dev.Device == key; gone[i] != lost || dev.UUID == "" {
			t.Errorf("stored device %+v gone %v", dev, gone[i])
		}
	}
	if len(devs) != 2 {
		t.Errorf("stored devices %+v; want n0's two GPUs, the lost one marked gone", devs)
	}

	// The pod ends: the ResourceClaim controller releases its claim, and
	// the claim is deleted, as the garbage collector deletes a claim whose
	// owning pod is gone.
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "trainer", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim stored released", func(ctx context.Context) (bool, error) {
		stored = claimRow()
		return stored.State == schedloop.ClaimDeallocated, nil
	})
	if stored.DeallocatedAt.Before(stored.ReservedAt) || len(stored.ReservedFor) != 0 || !slices.Equal(stored.Devices, []string{key}) {
		t.Errorf("released claim stored as %+v; want its release time, no consumer and the device it held", stored)
	}
	if err := rc.ResourceClaims("default").Delete(ctx, claims.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim stored deleted", func(ctx context.Context) (bool, error) {
		stored = claimRow()
		return stored.State == schedloop.ClaimDeleted, nil
	})
	if stored.DeletedAt.Before(stored.DeallocatedAt) || !slices.Equal(stored.Devices, []string{key}) ||
		!slices.Equal(stored.LostDevices, []string{key}) {
		t.Errorf("deleted claim stored as %+v; want its deletion time and the device it held, lost", stored)
	}

	// Devices of unknown kinds and faulty attributes are kept and counted.
	odd := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n0-odd"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: dra.Driver, NodeName: ptr.To("n0"), Pool: resourcev1.ResourcePool{Name: "n0-odd", ResourceSliceCount: 1},
		Devices: []resourcev1.Device{
			{Name: "gpu-7", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				dra.AttrType: {StringValue: ptr.To(dra.TypeGPU)}, dra.AttrNUMANode: {StringValue: ptr.To("zero")}}},
			{Name: "fpga-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				dra.AttrType: {StringValue: ptr.To("fpga")}, "vendor.example.com/lanes": {IntValue: ptr.To[int64](16)}}},
			{Name: "bare"},
		}}}
	if _, err := rc.ResourceSlices().Create(ctx, odd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the odd slice's devices stored", func(ctx context.Context) (bool, error) {
		devs, _, err := s.DRADevices(ctx, "n0")
		if err != nil {
			return false, err
		}
		byName := map[string]schedloop.DRADevice{}
		for _, dev := range devs {
			if dev.Pool == "n0-odd" {
				byName[dev.Device] = dev
			}
		}
		if len(byName) < 3 {
			return false, nil
		}
		if g := byName["gpu-7"]; g.Type != dra.TypeGPU || len(g.Problems) != 2 {
			t.Errorf("stored faulty GPU %+v; want its two problems (NUMA not an integer, no uuid)", g)
		}
		if f := byName["fpga-0"]; f.Type != "fpga" || !slices.Equal(f.Unknown, []string{"vendor.example.com/lanes"}) {
			t.Errorf("stored FPGA %+v; want its unknown attribute kept", f)
		}
		return true, nil
	})
}

// sliceNotes is how many ResourceSlice notifications w has handled.
func sliceNotes(w *events.Watcher) float64 {
	return testutil.ToFloat64(w.Collectors()[0].(*prometheus.CounterVec).WithLabelValues("ResourceSlice"))
}
