package collector_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/dra"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
	"github.com/schedloop/schedloop/internal/trace"
)

// The MIG node of these tests: one A100 cut into seven 1g.10gb instances,
// four held by busy pods, two by pods that do nothing and one free, beside
// one whole GPU nobody holds.
const (
	migNode    = "mig-0"
	migProfile = "1g.10gb"
	migSlices  = 7 // of an A100's compute
	migSpeed   = 30
)

var migUtils = map[string]float64{"busy-0": 0.9, "busy-1": 0.8, "busy-2": 0.95, "busy-3": 0.7, "idle-0": 0, "idle-1": 0.01}

var migNodeSpec = trace.Node{Name: migNode, GPUs: 1, GPUModel: "NVIDIA-A100-SXM4-80GB",
	MIG: map[string]int{"nvidia.com/mig-" + migProfile: migSlices}}

// traceClock runs trace time migSpeed times faster than the wall from
// an epoch, so a few wall seconds hold minutes of samples.
type traceClock struct{ epoch, origin time.Time }

func newTraceClock() traceClock {
	return traceClock{epoch: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC), origin: time.Now()}
}

func (c traceClock) at(wall time.Time) time.Time {
	return c.epoch.Add(time.Duration(float64(wall.Sub(c.origin)) * migSpeed))
}

func (c traceClock) Now() time.Time { return c.at(time.Now()) }

// waitRunning waits until want pods of default run.
func waitRunning(t *testing.T, c *harness.Cluster, want int) {
	t.Helper()
	waitUntil(t, "every pod to run", func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodFailed {
				return false, fmt.Errorf("pod %s failed: %s", p.Name, p.Status.Message)
			}
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == want, nil
	})
}

// collectMIG runs the collector on clk's time with cfg's telemetry for
// three trace minutes, stores everything, rolls the states up and returns
// the stored pods' UIDs by name. The pods ran before the first sample, so
// no minute has waiting demand.
func collectMIG(t *testing.T, c *harness.Cluster, s *store.Store, clk traceClock, cfg collector.PipelineConfig) map[string]string {
	t.Helper()
	ctx := t.Context()
	cfg.Store, cfg.ScrapeEvery = s, 10*time.Second/migSpeed
	cfg.Ingest = collector.IngestOptions{FlushInterval: 50 * time.Millisecond}
	cfg.RollupEvery, cfg.RollupWindow, cfg.RollupNow, cfg.InventoryEvery = time.Hour, 2*time.Hour, clk.Now, 100*time.Millisecond
	cfg.ETAEvery = -1
	cfg.Watch = &events.WatchOptions{Client: c.Client, Dynamic: c.Dynamic, FlushInterval: 100 * time.Millisecond, MapTime: clk.at}
	cfg.Logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pipe, err := collector.StartPipeline(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			if err := pipe.Stop(); err != nil {
				t.Errorf("collector pipeline: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	waitUntil(t, "three trace minutes of samples", func(context.Context) (bool, error) {
		return clk.Now().After(clk.epoch.Add(3*time.Minute + 20*time.Second)), nil
	})
	pipe.StopTelemetry()
	waitUntil(t, "every sample to be stored", func(context.Context) (bool, error) { return pipe.Stored(), nil })
	uids := map[string]string{}
	waitUntil(t, "every pod to be stored", func(ctx context.Context) (bool, error) {
		rows, err := readPods(ctx, s)
		if err != nil {
			return false, err
		}
		for _, r := range rows {
			uids[r.name] = r.uid
		}
		return len(uids) == len(migUtils), nil
	})
	stop()
	final := &collector.Roller{Store: s, Window: 2 * time.Hour, Lookback: 2 * time.Hour,
		Now: func() time.Time { return clk.Now().Add(time.Hour) }}
	if err := final.Once(ctx); err != nil {
		t.Fatal(err)
	}
	return uids
}

// checkMIGAccounting checks that each pod of migUtils was attributed to
// its own instance of the partitioned GPU, read as busy as the pod ran,
// and that the stored idle split equals the one this test counts from what
// it asked the cluster for: per minute with samples, each instance adds
// 1/7 of a GPU-minute to its state and the whole GPU one.
func checkMIGAccounting(t *testing.T, s *store.Store, clk traceClock, uids map[string]string, partitioned string) {
	t.Helper()
	ctx := t.Context()
	held := map[string]string{}
	for name, util := range migUtils {
		gpus, err := s.PodGPUs(ctx, uids[name])
		if err != nil {
			t.Fatal(err)
		}
		if len(gpus) != 1 {
			t.Errorf("pod %s held %+v; want one MIG instance", name, gpus)
			continue
		}
		g := gpus[0]
		if g.GPUUUID != partitioned || g.GPUInstance == "" || g.GPUInstanceProfile != migProfile || math.Abs(g.ComputeShare-1.0/migSlices) > 1e-6 {
			t.Errorf("pod %s attributed to %+v; want a %s instance of %s holding 1/%d of it", name, g, migProfile, partitioned, migSlices)
		}
		if other, dup := held[g.GPUInstance]; dup {
			t.Errorf("pods %s and %s both attributed to instance %s", other, name, g.GPUInstance)
		}
		held[g.GPUInstance] = name
		if math.Abs(g.GrEngineActiveAvg-util) > 1e-6 {
			t.Errorf("pod %s: its instance read %.3f engine-active; the pod ran at %.3f", name, g.GrEngineActiveAvg, util)
		}
	}

	rows, err := s.GPUMinutes(ctx, partitioned, clk.epoch.Add(-time.Hour), clk.epoch.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	minutes := map[time.Time]bool{}
	for _, r := range rows {
		minutes[r.Minute] = true
	}
	if len(minutes) < 3 {
		t.Fatalf("%d minutes of samples stored for %s; the run spans at least 3", len(minutes), partitioned)
	}
	want := map[string]float64{}
	for range minutes {
		for _, util := range migUtils {
			if util >= store.DefaultIdleThreshold {
				want["busy"] += 1.0 / migSlices
			} else {
				want["allocated_idle"] += 1.0 / migSlices
			}
		}
		want["spare"] += float64(migSlices-len(migUtils))/migSlices + 1 // the free instance, the whole GPU
	}
	states, err := s.GPUStateMinutes(ctx, clk.epoch.Add(-time.Hour), clk.epoch.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, r := range states {
		got[r.State] += r.Minutes
	}
	for _, state := range []string{"busy", "allocated_idle", "spare", "unallocated_waiting"} {
		// Shares are stored as real (float32): a few ulps per minute.
		if math.Abs(got[state]-want[state]) > 1e-3 {
			t.Errorf("%s: stored %.4f GPU-minutes, counted %.4f (all stored: %v)", state, got[state], want[state], got)
		}
	}
}

// TestMIGInstancesAttributedToTheirPods runs the collector against the
// MIG node's dcgm-exporter, its pods given their instances by the device
// plugin. Each pod must be attributed to its own instance (not to the GPU),
// the inventory must list the instances under their GPU, and the idle split
// must be the test's own count (checkMIGAccounting).
func TestMIGInstancesAttributedToTheirPods(t *testing.T) {
	ctx := t.Context()
	c := harness.NewForTest(t, harness.Options{})
	s := storetest.New(t)
	nodes, err := c.AddNodes(ctx, []trace.Node{migNodeSpec}, harness.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, util := range migUtils {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
				Annotations: map[string]string{harness.AnnotationGPUUtil: strconv.FormatFloat(util, 'f', -1, 64)}},
			Spec: corev1.PodSpec{NodeName: migNode, Containers: []corev1.Container{{Name: "main", Image: "infer",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					"nvidia.com/mig-" + migProfile: resource.MustParse("1")}}}}},
		}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitRunning(t, c, len(migUtils))
	clk := newTraceClock()
	uids := collectMIG(t, c, s, clk, collector.PipelineConfig{
		Scraper: &dcgm.ExporterScraper{Targets: dcgm.StaticTargets([]string{nodes.ExporterURL(migNode)}), Now: clk.Now}})

	// The inventory: the whole GPU, the partitioned GPU, its seven instances.
	inv, err := s.ListGPUs(ctx, migNode)
	if err != nil {
		t.Fatal(err)
	}
	var partitioned string
	instances := 0
	for _, g := range inv {
		if g.Instance != "" {
			instances++
			partitioned = g.UUID
			if g.MIGProfile != migProfile {
				t.Errorf("inventory instance %+v: profile %q, want %q", g, g.MIGProfile, migProfile)
			}
		}
	}
	if instances != migSlices || len(inv) != 2+migSlices {
		t.Fatalf("inventory of %s = %+v; want a whole GPU, a partitioned one and its %d instances", migNode, inv, migSlices)
	}
	checkMIGAccounting(t, s, clk, uids, partitioned)
}

// hostEngine stands in for the go-dcgm source on a harness node: it reads
// the node's devices as the host engine reads them, whole GPUs and MIG
// instances, naming no pod, and knows each instance's MIG- UUID
// (dcgm.InstanceDevicer).
type hostEngine struct {
	nodes *harness.Nodes
	node  string
	now   func() time.Time
	calls atomic.Int32
}

func (h *hostEngine) Collect(context.Context) ([]schedloop.GPUSample, error) {
	// Distinct times per round: samples are keyed by time and device.
	at := h.now().Truncate(time.Millisecond).Add(time.Duration(h.calls.Add(1)) * time.Microsecond)
	var out []schedloop.GPUSample
	for _, g := range h.nodes.GPUs(h.node) {
		share := 0.0
		if g.Instance != "" {
			var err error
			if share, err = schedloop.MIGComputeShare(g.Model, g.Profile); err != nil {
				return nil, err
			}
		}
		out = append(out, schedloop.GPUSample{Time: at, GPUUUID: g.UUID, Node: h.node, GPUIndex: g.Index,
			GrEngineActive: g.Util, GPUInstance: g.Instance, GPUInstanceProfile: g.Profile, ComputeShare: share})
	}
	return out, nil
}

func (h *hostEngine) InstanceDeviceIDs() map[dcgm.InstanceKey]string {
	out := map[dcgm.InstanceKey]string{}
	for _, g := range h.nodes.GPUs(h.node) {
		if g.Instance != "" {
			out[dcgm.InstanceKey{GPUUUID: g.UUID, Instance: g.Instance}] = g.MIGUUID
		}
	}
	return out
}

// runDRAMIGPods starts the scheduler and the pods of migUtils, each given
// one MIG instance by its claim of class mig.nvidia.com, and waits until
// they run.
func runDRAMIGPods(t *testing.T, c *harness.Cluster) {
	t.Helper()
	ctx := t.Context()
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, util := range migUtils {
		claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name + "-mig", Namespace: "default"},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "mig",
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: dra.ClassMIG, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}}
		if _, err := c.Client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
				Annotations: map[string]string{harness.AnnotationGPUUtil: strconv.FormatFloat(util, 'f', -1, 64)}},
			Spec: corev1.PodSpec{
				ResourceClaims: []corev1.PodResourceClaim{{Name: "mig", ResourceClaimName: ptr.To(claim.Name)}},
				Containers: []corev1.Container{{Name: "main", Image: "infer",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "mig"}}}}}},
		}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitRunning(t, c, len(migUtils))
}

// TestDRAMIGInstancesAttributedFromExporterLabels runs the MIG node with
// its instances handed out through DRA and telemetry from its
// dcgm-exporter, which prints each claimed instance with its claim, its
// profile and its MIG- UUID (dra_mig_device_uuid). Each pod must be
// attributed to its own instance, each claimed instance must be one
// inventory row under its GPU joining the exporter's GPU_I_ID with the
// ResourceSlice's MIG- UUID, and the idle split must be the test's own
// count.
func TestDRAMIGInstancesAttributedFromExporterLabels(t *testing.T) {
	ctx := t.Context()
	c := harness.NewForTest(t, harness.Options{})
	s := storetest.New(t)
	nodes, err := c.AddNodes(ctx, []trace.Node{migNodeSpec}, harness.NodeOptions{DRA: true})
	if err != nil {
		t.Fatal(err)
	}
	runDRAMIGPods(t, c)
	var partitioned string
	claimed := map[string]string{} // GPU_I_ID -> MIG- UUID of each instance a pod holds
	for _, g := range nodes.GPUs(migNode) {
		if g.Instance == "" {
			continue
		}
		partitioned = g.UUID
		if g.Pod != "" {
			if g.DRA == nil {
				t.Fatalf("instance %s held by %s without a claim", g.Instance, g.Pod)
			}
			claimed[g.Instance] = g.MIGUUID
		}
	}
	if len(claimed) != len(migUtils) {
		t.Fatalf("%d instances held, want %d", len(claimed), len(migUtils))
	}
	clk := newTraceClock()
	uids := collectMIG(t, c, s, clk, collector.PipelineConfig{
		Scraper: &dcgm.ExporterScraper{Targets: dcgm.StaticTargets([]string{nodes.ExporterURL(migNode)}), Now: clk.Now}})

	inv, err := s.ListGPUs(ctx, migNode)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int{}
	for _, g := range inv {
		if want, ok := claimed[g.Instance]; ok && g.UUID == partitioned {
			rows[g.Instance]++
			if g.MIGUUID != want || g.MIGProfile != migProfile {
				t.Errorf("inventory row of instance %s: %+v; want MIG UUID %s, profile %s", g.Instance, g, want, migProfile)
			}
		}
		if g.MIGUUID != "" && g.Instance == "" && slices.Contains(slices.Collect(maps.Values(claimed)), g.MIGUUID) {
			t.Errorf("claimed instance %s has a ResourceSlice row apart from its telemetry's: %+v", g.MIGUUID, g)
		}
	}
	for id := range claimed {
		if rows[id] != 1 {
			t.Errorf("instance %s of %s: %d inventory rows, want 1 (inventory %+v)", id, partitioned, rows[id], inv)
		}
	}
	checkMIGAccounting(t, s, clk, uids, partitioned)
}

// TestDRAMIGInstancesAttributedFromClaims runs the MIG node with its GPUs
// handed out through DRA: each pod's claim asks class mig.nvidia.com for
// one instance, the scheduler allocates it, and telemetry comes from the
// host engine, which names no pod. Each instance's samples must reach the
// pod whose claim holds it (the slice's MIG- UUID joined with the host
// engine's), and the idle split must be the test's own count.
func TestDRAMIGInstancesAttributedFromClaims(t *testing.T) {
	ctx := t.Context()
	c := harness.NewForTest(t, harness.Options{})
	s := storetest.New(t)
	nodes, err := c.AddNodes(ctx, []trace.Node{migNodeSpec}, harness.NodeOptions{DRA: true, NoExporters: true})
	if err != nil {
		t.Fatal(err)
	}
	runDRAMIGPods(t, c)
	waitRunning(t, c, len(migUtils))
	var partitioned string
	for _, g := range nodes.GPUs(migNode) {
		if g.Instance != "" {
			partitioned = g.UUID
		}
	}
	clk := newTraceClock()
	src := &hostEngine{nodes: nodes, node: migNode, now: clk.Now}
	uids := collectMIG(t, c, s, clk, collector.PipelineConfig{Sources: []collector.Source{src}})
	checkMIGAccounting(t, s, clk, uids, partitioned)
}
