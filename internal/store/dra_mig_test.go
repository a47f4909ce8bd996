package store_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
)

const draModel = "NVIDIA A100-SXM4-40GB"

// draMIG is a MIG instance as NVIDIA's DRA driver publishes it on node n1:
// its own UUID, its parent's and its profile, no GPU instance id.
func draMIG(name, uuid, profile string) schedloop.DRADevice {
	return schedloop.DRADevice{Driver: "gpu.nvidia.com", Pool: "n1", Device: name, Node: "n1", Type: "mig",
		UUID: uuid, ParentUUID: "GPU-p", Product: draModel, Profile: profile}
}

// storeWithDRAParent is a store holding node n1 and the GPU GPU-p its
// slices' MIG instances name as parent.
func storeWithDRAParent(t *testing.T) *store.Store {
	t.Helper()
	s := storeWithNode(t)
	if err := s.UpsertGPUs(ctx, []schedloop.GPU{{UUID: "GPU-p", Node: "n1", Model: draModel}}); err != nil {
		t.Fatal(err)
	}
	return s
}

// instanceRow is one gpu_instances row: its id ("" while unknown), MIG
// UUID and whether it is gone.
type instanceRow struct {
	id, migUUID, profile string
	gone                 bool
}

func instanceRows(t *testing.T, s *store.Store) []instanceRow {
	t.Helper()
	rows, err := s.Pool().Query(ctx, `
		SELECT coalesce(gpu_instance, ''), coalesce(mig_uuid, ''), profile, gone_at IS NOT NULL
		FROM gpu_instances WHERE gpu_uuid = 'GPU-p' ORDER BY mig_uuid, gpu_instance`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []instanceRow
	for rows.Next() {
		var r instanceRow
		if err := rows.Scan(&r.id, &r.migUUID, &r.profile, &r.gone); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// An instance a slice publishes is an inventory row under its parent GPU
// before any telemetry; telemetry naming the same MIG UUID gives that row
// its GPU instance id rather than adding a second one, whichever came
// first; an instance no slice publishes any more is kept, marked gone, and
// no longer listed.
func TestDRAMIGInstancesInInventory(t *testing.T) {
	s := storeWithDRAParent(t)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	a, b := draMIG("gpu-0-mig-1", "MIG-a", "3g.20gb"), draMIG("gpu-0-mig-2", "MIG-b", "1g.5gb")
	if err := s.ReplaceDRADevices(ctx, []schedloop.DRADevice{a, b}, t0); err != nil {
		t.Fatal(err)
	}
	want := []instanceRow{{"", "MIG-a", "3g.20gb", false}, {"", "MIG-b", "1g.5gb", false}}
	if got := instanceRows(t, s); !slices.Equal(got, want) {
		t.Fatalf("published only: %+v, want %+v", got, want)
	}
	listed, err := s.ListGPUs(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 3 || listed[1].MIGUUID != "MIG-a" || listed[2].MIGUUID != "MIG-b" || listed[1].MIGProfile != "3g.20gb" {
		t.Fatalf("ListGPUs = %+v, want GPU-p and its instances MIG-a, MIG-b", listed)
	}

	// MIG-a's telemetry names its UUID; instance 2 reports first without
	// one and then with MIG-b's.
	tele := func(id, profile, migUUID string) schedloop.GPU {
		return schedloop.GPU{UUID: "GPU-p", Node: "n1", Model: draModel, Instance: id, MIGProfile: profile, MIGUUID: migUUID}
	}
	for _, g := range [][]schedloop.GPU{{tele("1", "3g.20gb", "MIG-a"), tele("2", "1g.5gb", "")}, {tele("2", "1g.5gb", "MIG-b")}} {
		if err := s.RecordGPUs(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	want = []instanceRow{{"1", "MIG-a", "3g.20gb", false}, {"2", "MIG-b", "1g.5gb", false}}
	if got := instanceRows(t, s); !slices.Equal(got, want) {
		t.Fatalf("after telemetry: %+v, want %+v", got, want)
	}
	// Republishing the slice leaves the matched rows as they are.
	if err := s.ReplaceDRADevices(ctx, []schedloop.DRADevice{a, b}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := instanceRows(t, s); !slices.Equal(got, want) {
		t.Fatalf("republished: %+v, want %+v", got, want)
	}

	if err := s.ReplaceDRADevices(ctx, []schedloop.DRADevice{a}, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	want = []instanceRow{{"1", "MIG-a", "3g.20gb", false}, {"2", "MIG-b", "1g.5gb", true}}
	if got := instanceRows(t, s); !slices.Equal(got, want) {
		t.Fatalf("MIG-b unpublished: %+v, want %+v", got, want)
	}
	if listed, err = s.ListGPUs(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 || listed[1].Instance != "1" || listed[1].MIGUUID != "MIG-a" {
		t.Fatalf("ListGPUs after MIG-b went = %+v, want GPU-p and instance 1 (MIG-a)", listed)
	}
}

// A GPU cut into a 3g instance that a pod keeps busy and a 1g instance
// its slice publishes but nothing has used (so no telemetry names it)
// reads 3/7 busy and 1/7 spare: the unused instance is idle capacity, not
// missing from the split.
func TestDRAMIGInstanceWithoutTelemetryIsIdle(t *testing.T) {
	s := storeWithDRAParent(t)
	m0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if err := s.ReplaceDRADevices(ctx, []schedloop.DRADevice{
		draMIG("gpu-0-mig-1", "MIG-a", "3g.20gb"), draMIG("gpu-0-mig-2", "MIG-b", "1g.5gb")}, m0.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	const minutes = 60
	var samples []schedloop.GPUSample
	for i := range minutes {
		at := m0.Add(time.Duration(i) * time.Minute)
		samples = append(samples,
			schedloop.GPUSample{Time: at, GPUUUID: "GPU-p", Node: "n1", GrEngineActive: 0.5},
			schedloop.GPUSample{Time: at, GPUUUID: "GPU-p", Node: "n1", PodNamespace: "ml", PodName: "train",
				GrEngineActive: 0.9, GPUInstance: "1", GPUInstanceProfile: "3g.20gb", ComputeShare: 3.0 / 7, MIGDeviceUUID: "MIG-a"})
	}
	if _, err := s.CopyGPUSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordGPUs(ctx, []schedloop.GPU{{UUID: "GPU-p", Node: "n1", Model: draModel,
		Instance: "1", MIGProfile: "3g.20gb", MIGUUID: "MIG-a"}}); err != nil {
		t.Fatal(err)
	}
	rollUp(t, s, m0, m0.Add(minutes*time.Minute))
	got := stateMinutes(t, s, m0, m0.Add(time.Hour))
	want := map[string]float64{"busy": minutes * 3.0 / 7, "spare": minutes * 1.0 / 7}
	if len(got) != len(want) || math.Abs(got["busy"]-want["busy"]) > 1e-3 || math.Abs(got["spare"]-want["spare"]) > 1e-3 {
		t.Fatalf("GPU-minutes by state = %v, want %v", got, want)
	}
}
