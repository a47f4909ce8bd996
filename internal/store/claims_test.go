package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestResourceClaimLifecycle: a claim observed pending, reserved with a
// device, released and deleted keeps the first time of each state and the
// devices it last held; an allocation after a release clears the release
// time; a claim without a known state is refused, naming the field.
func TestResourceClaimLifecycle(t *testing.T) {
	s := storetest.New(t)
	ctx := t.Context()
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	c := schedloop.ResourceClaim{UID: "c-1", Namespace: "ml", Name: "train-0-gpus", State: schedloop.ClaimPending, GPUs: 1, CreatedAt: t0}
	write := func(c schedloop.ResourceClaim) {
		t.Helper()
		if err := s.UpsertResourceClaims(ctx, []schedloop.ResourceClaim{c}); err != nil {
			t.Fatal(err)
		}
	}
	write(c)
	reserved := c
	reserved.State, reserved.Node, reserved.ReservedFor = schedloop.ClaimReserved, "n0", []string{"pod-1"}
	reserved.Devices, reserved.DeviceUUIDs = []string{"gpu.nvidia.com/n0/gpu-1"}, []string{"GPU-1"}
	reserved.AllocatedAt, reserved.ReservedAt = t0.Add(time.Second), t0.Add(time.Second)
	write(reserved)
	later := reserved
	later.AllocatedAt, later.ReservedAt = t0.Add(time.Minute), t0.Add(time.Minute) // a restarted collector's first sight
	later.LostDevices = []string{"gpu.nvidia.com/n0/gpu-1"}
	write(later)
	released := schedloop.ResourceClaim{UID: "c-1", Namespace: "ml", Name: "train-0-gpus", State: schedloop.ClaimDeallocated,
		GPUs: 1, CreatedAt: t0, DeallocatedAt: t0.Add(time.Hour)}
	write(released)
	deleted := released
	deleted.State, deleted.DeletedAt = schedloop.ClaimDeleted, t0.Add(2*time.Hour)
	write(deleted)

	got, err := s.ResourceClaims(ctx, "ml")
	if err != nil {
		t.Fatal(err)
	}
	want := []schedloop.ResourceClaim{{UID: "c-1", Namespace: "ml", Name: "train-0-gpus", State: schedloop.ClaimDeleted,
		Node: "n0", ReservedFor: []string{}, Devices: []string{"gpu.nvidia.com/n0/gpu-1"}, DeviceUUIDs: []string{"GPU-1"},
		LostDevices: []string{"gpu.nvidia.com/n0/gpu-1"}, GPUs: 1, CreatedAt: t0, AllocatedAt: t0.Add(time.Second),
		ReservedAt: t0.Add(time.Second), DeallocatedAt: t0.Add(time.Hour), DeletedAt: t0.Add(2 * time.Hour)}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stored claim (-want +got):\n%s", d)
	}

	again := reserved
	again.UID, again.LostDevices = "c-2", nil
	write(again)
	rel := released
	rel.UID = "c-2"
	write(rel)
	again.AllocatedAt = t0.Add(3 * time.Hour)
	write(again)
	got, err = s.ResourceClaims(ctx, "ml")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].UID != "c-2" || got[1].State != schedloop.ClaimReserved || !got[1].DeallocatedAt.IsZero() {
		t.Errorf("claim allocated again after its release stored as %+v; want reserved, no release time", got)
	}

	bad := c
	bad.State = "bound"
	if err := s.UpsertResourceClaims(ctx, []schedloop.ResourceClaim{bad}); err == nil || !strings.Contains(err.Error(), `state "bound"`) {
		t.Errorf("a claim in state bound stored with error %v; want one naming the state", err)
	}
}

// TestDRADevicesReplaced: devices published again are kept current, one no
// slice publishes any more is kept and marked gone, and it is no longer gone
// once published again.
func TestDRADevicesReplaced(t *testing.T) {
	s := storetest.New(t)
	ctx := t.Context()
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	gpu := func(name string) schedloop.DRADevice {
		return schedloop.DRADevice{Driver: "gpu.nvidia.com", Pool: "n0", Device: name, Node: "n0", Type: "gpu", UUID: "GPU-" + name}
	}
	odd := schedloop.DRADevice{Driver: "gpu.nvidia.com", Pool: "n0", Device: "x", Node: "n0", Type: "gpu",
		Unknown: []string{"vendor.example.com/lanes"}, Problems: []string{"slice s device x: attribute uuid missing"}}
	step := func(at time.Time, devs ...schedloop.DRADevice) map[string]bool {
		t.Helper()
		if err := s.ReplaceDRADevices(ctx, devs, at); err != nil {
			t.Fatal(err)
		}
		got, gone, err := s.DRADevices(ctx, "n0")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for i, d := range got {
			out[d.Device] = gone[i]
			if d.Device == "x" && (!cmp.Equal(d.Unknown, odd.Unknown) || !cmp.Equal(d.Problems, odd.Problems)) {
				t.Errorf("device x stored as %+v", d)
			}
		}
		return out
	}
	if got := step(t0, gpu("gpu-0"), gpu("gpu-1"), odd); !cmp.Equal(got, map[string]bool{"gpu-0": false, "gpu-1": false, "x": false}) {
		t.Errorf("first: %v", got)
	}
	if got := step(t0.Add(time.Minute), gpu("gpu-0"), odd); !cmp.Equal(got, map[string]bool{"gpu-0": false, "gpu-1": true, "x": false}) {
		t.Errorf("gpu-1 gone: %v", got)
	}
	if got := step(t0.Add(2*time.Minute), gpu("gpu-0"), gpu("gpu-1")); !cmp.Equal(got, map[string]bool{"gpu-0": false, "gpu-1": false, "x": true}) {
		t.Errorf("gpu-1 back, x gone: %v", got)
	}
}
