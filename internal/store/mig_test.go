package store_test

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
)

// rollUp runs the idle split over [from, to) as the collector does.
func rollUp(t *testing.T, s *store.Store, from, to time.Time) {
	t.Helper()
	if _, err := s.RollupGPUMinutes(ctx, from, to); err != nil {
		t.Fatal(err)
	}
	if err := s.RollupDemand(ctx, from, to); err != nil {
		t.Fatal(err)
	}
	if err := s.RollupStates(ctx, from, to, store.DefaultIdleThreshold); err != nil {
		t.Fatal(err)
	}
}

// stateMinutes adds up GPUStateMinutes per state.
func stateMinutes(t *testing.T, s *store.Store, from, to time.Time) map[string]float64 {
	t.Helper()
	rows, err := s.GPUStateMinutes(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, r := range rows {
		out[r.State] += r.Minutes
	}
	return out
}

// An A100 cut into seven 1g instances, four running hot and three held by
// pods that do nothing, reads 4/7 busy and 3/7 allocated but idle. The whole
// GPU's own series, which dcgm-exporter prints beside its instances (and
// which here looks busy), must not count a second time.
func TestPartitionedGPUReadsPartlyIdle(t *testing.T) {
	s := storeWithNode(t)
	m0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	const minutes = 60
	var samples []schedloop.GPUSample
	for i := range minutes {
		at := m0.Add(time.Duration(i) * time.Minute)
		samples = append(samples, schedloop.GPUSample{Time: at, GPUUUID: "GPU-mig", Node: "n1", GrEngineActive: 0.6})
		for inst := range 7 {
			active := 0.9
			if inst >= 4 {
				active = 0.01
			}
			samples = append(samples, schedloop.GPUSample{Time: at, GPUUUID: "GPU-mig", Node: "n1",
				PodNamespace: "ml", PodName: fmt.Sprintf("infer-%d", inst), GrEngineActive: active,
				GPUInstance: fmt.Sprint(inst + 7), GPUInstanceProfile: "1g.10gb", ComputeShare: 1.0 / 7})
		}
	}
	if _, err := s.CopyGPUSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	rollUp(t, s, m0, m0.Add(minutes*time.Minute))
	got := stateMinutes(t, s, m0, m0.Add(time.Hour))
	want := map[string]float64{"busy": minutes * 4.0 / 7, "allocated_idle": minutes * 3.0 / 7}
	if len(got) != len(want) || math.Abs(got["busy"]-want["busy"]) > 1e-3 || math.Abs(got["allocated_idle"]-want["allocated_idle"]) > 1e-3 {
		t.Fatalf("GPU-minutes by state = %v, want %v", got, want)
	}
	b, err := s.GPUIdleBreakdown(ctx, m0, m0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if b.Total() != minutes || math.Abs(b.IdleShare()-3.0/7) > 0.01 {
		t.Errorf("breakdown %+v: total %d (want %d GPU-minutes), idle share %.3f (want 3/7)", b, b.Total(), minutes, b.IdleShare())
	}
	mins, err := s.GPUMinutes(ctx, "GPU-mig", m0, m0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(mins) != 8 || mins[0].GPUInstance != "" || mins[0].ComputeShare != 1 ||
		mins[1].GPUInstance != "10" || mins[1].GPUInstanceProfile != "1g.10gb" || math.Abs(mins[1].ComputeShare-1.0/7) > 1e-6 {
		t.Errorf("first minute's rollup rows = %+v, want the whole GPU then seven 1g instances", mins)
	}
}

// migDevice is one device of the model below: a whole GPU, or an instance.
type migDevice struct {
	uuid, instance, profile string
	slices                  int // of the GPU's seven; 7 for a whole GPU
}

// TestIdleSplitMatchesIndependentCount replays a seeded mix of whole and
// partitioned GPUs, held or free, busy or idle, with waiting demand, and
// compares the stored split with one counted here from the test's own
// description of the devices: each minute, every instance (and every
// unpartitioned GPU) adds slices/7 of a GPU-minute to its state, and free
// devices, in UUID and instance order, count as waiting while the free
// compute before them is less than the demand.
func TestIdleSplitMatchesIndependentCount(t *testing.T) {
	s := storeWithNode(t)
	rng := rand.New(rand.NewPCG(18, 7))
	layouts := [][]int{{7}, {1, 1, 1, 1, 1, 1, 1}, {3, 2, 1, 1}, {4, 3}, {2, 2, 2, 1}}
	var devices []migDevice
	var whole []string // partitioned GPUs, whose whole-GPU series is printed too
	for g := range 6 {
		uuid := fmt.Sprintf("GPU-%02d", g)
		layout := layouts[rng.IntN(len(layouts))]
		if len(layout) == 1 {
			devices = append(devices, migDevice{uuid: uuid, slices: 7})
			continue
		}
		whole = append(whole, uuid)
		for i, n := range layout {
			devices = append(devices, migDevice{uuid: uuid, instance: fmt.Sprint(i + 1), profile: fmt.Sprintf("%dg.%dgb", n, 10*n), slices: n})
		}
	}
	m0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	const minutes = 45
	want := map[string]float64{}
	var samples []schedloop.GPUSample
	var pods []schedloop.Pod
	for i := range minutes {
		at := m0.Add(time.Duration(i) * time.Minute)
		for _, u := range whole {
			samples = append(samples, schedloop.GPUSample{Time: at, GPUUUID: u, Node: "n1", GrEngineActive: rng.Float64()})
		}
		// Waiting demand this minute: whole GPUs and fractions of one.
		demand := 0
		for p := range rng.IntN(4) {
			gpus := 1 + rng.IntN(2)
			demand += gpus
			pods = append(pods, schedloop.Pod{UID: fmt.Sprintf("wait-%d-%d", i, p), Namespace: "ml", Name: fmt.Sprintf("wait-%d-%d", i, p),
				GPUs: gpus, Created: at, Scheduled: at.Add(time.Minute)})
		}
		var free []migDevice
		for _, d := range devices {
			share := float64(d.slices) / 7
			smp := schedloop.GPUSample{Time: at, GPUUUID: d.uuid, Node: "n1", GPUInstance: d.instance, GPUInstanceProfile: d.profile}
			if d.instance != "" {
				smp.ComputeShare = share
			}
			switch r := rng.IntN(3); r {
			case 0:
				free = append(free, d)
			default:
				smp.PodNamespace, smp.PodName = "ml", "holder-"+d.uuid+"-"+d.instance
				if r == 1 {
					smp.GrEngineActive = 0.5 + rng.Float64()/2
					want["busy"] += share
				} else {
					smp.GrEngineActive = rng.Float64() * 0.04
					want["allocated_idle"] += share
				}
			}
			samples = append(samples, smp)
		}
		slices.SortFunc(free, func(a, b migDevice) int {
			return cmp.Or(cmp.Compare(a.uuid, b.uuid), cmp.Compare(a.instance, b.instance))
		})
		// Counted in slices, exactly: every GPU here has seven.
		before := 0
		for _, d := range free {
			share := float64(d.slices) / 7
			if before < 7*demand {
				want["unallocated_waiting"] += share
			} else {
				want["spare"] += share
			}
			before += d.slices
		}
	}
	if _, err := s.CopyGPUSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertPods(ctx, pods); err != nil {
		t.Fatal(err)
	}
	rollUp(t, s, m0, m0.Add(minutes*time.Minute))
	got := stateMinutes(t, s, m0, m0.Add(time.Hour))
	total := 0.0
	for _, state := range []string{"busy", "allocated_idle", "unallocated_waiting", "spare"} {
		if want[state] == 0 {
			t.Fatalf("the seeded mix has no %s minutes; it must exercise every state", state)
		}
		// Shares are stored as real (float32): a few ulps per minute.
		if math.Abs(got[state]-want[state]) > 1e-3 {
			t.Errorf("%s: stored %.4f GPU-minutes, counted %.4f", state, got[state], want[state])
		}
		total += got[state]
	}
	if math.Abs(total-minutes*6) > 1e-3 {
		t.Errorf("states add up to %.4f GPU-minutes; six GPUs over %d minutes are %d", total, minutes, minutes*6)
	}
}

// The inventory keeps a partitioned GPU once and its instances under it, with
// their compute shares; an instance whose GPU was not listed creates its row.
func TestInventoryKeepsInstances(t *testing.T) {
	s := storeWithNode(t)
	const uuid = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"
	gpus := []schedloop.GPU{
		{UUID: uuid, Node: "n1", Index: 0, Model: "NVIDIA A100-SXM4-40GB", MIGProfile: "3g.20gb", Instance: "2"},
		{UUID: uuid, Node: "n1", Index: 0, Model: "NVIDIA A100-SXM4-40GB", MIGProfile: "1g.5gb", Instance: "13"},
		{UUID: "GPU-whole", Node: "n1", Index: 1, Model: "NVIDIA A100-SXM4-40GB"},
	}
	if err := s.RecordGPUs(ctx, gpus); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListGPUs(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	want := []schedloop.GPU{
		{UUID: uuid, Node: "n1", Index: 0, Model: "NVIDIA A100-SXM4-40GB"},
		gpus[1], gpus[0], gpus[2],
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ListGPUs = %+v\nwant %+v", got, want)
	}
	bad := schedloop.GPU{UUID: uuid, Node: "n1", Model: "NVIDIA A30", MIGProfile: "7g.80gb", Instance: "1"}
	if err := s.RecordGPUs(ctx, []schedloop.GPU{bad}); err == nil || !strings.Contains(err.Error(), `MIG profile "7g.80gb"`) {
		t.Errorf("RecordGPUs(%+v) error = %v, want one naming the profile", bad, err)
	}
}

// A pod holding two 1g instances of one GPU is attributed to each instance,
// with its profile and share, and holds two devices, not one GPU.
func TestPodAttributedToEachInstance(t *testing.T) {
	s := storeWithNode(t)
	m0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	pod := schedloop.Pod{UID: "uid-1", Namespace: "ml", Name: "pair", Node: "n1", Created: m0, Scheduled: m0, Started: m0, Phase: schedloop.PhaseRunning}
	if err := s.UpsertPods(ctx, []schedloop.Pod{pod}); err != nil {
		t.Fatal(err)
	}
	var samples []schedloop.GPUSample
	for i := range 3 {
		at := m0.Add(time.Duration(i) * time.Minute)
		samples = append(samples, schedloop.GPUSample{Time: at, GPUUUID: "GPU-mig", Node: "n1", GrEngineActive: 0.5})
		for inst, active := range map[string]float64{"7": 0.9, "8": 0.01} {
			samples = append(samples, schedloop.GPUSample{Time: at, GPUUUID: "GPU-mig", Node: "n1", PodNamespace: "ml", PodName: "pair",
				GrEngineActive: active, GPUInstance: inst, GPUInstanceProfile: "1g.10gb", ComputeShare: 1.0 / 7})
		}
	}
	if _, err := s.CopyGPUSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	rollUp(t, s, m0, m0.Add(3*time.Minute))
	gpus, err := s.PodGPUs(ctx, pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 2 {
		t.Fatalf("PodGPUs = %+v, want instances 7 and 8 of GPU-mig", gpus)
	}
	for i, want := range []struct {
		instance string
		active   float64
	}{{"7", 0.9}, {"8", 0.01}} {
		g := gpus[i]
		if g.GPUUUID != "GPU-mig" || g.GPUInstance != want.instance || g.GPUInstanceProfile != "1g.10gb" ||
			math.Abs(g.ComputeShare-1.0/7) > 1e-6 || g.Minutes != 3 || math.Abs(g.GrEngineActiveAvg-want.active) > 1e-6 {
			t.Errorf("PodGPUs[%d] = %+v, want instance %s (1g.10gb, 1/7) for 3 minutes at %.2f", i, g, want.instance, want.active)
		}
	}
	act, err := s.PodGPUActivity(ctx, "ml", []string{"pair"}, m0, m0.Add(3*time.Minute), 3*time.Minute, store.DefaultIdleThreshold)
	if err != nil {
		t.Fatal(err)
	}
	if len(act) != 1 || act[0].GPUs != 2 || act[0].IdleMinutes != 3 {
		t.Errorf("PodGPUActivity = %+v, want one bucket of 2 devices with 3 idle instance-minutes", act)
	}
}
