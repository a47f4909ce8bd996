package collector_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
	"github.com/schedloop/schedloop/internal/trace"
)

// TestMIGInstancesAttributedToTheirPods runs the collector against a
// harness node whose A100 is cut into seven 1g.10gb instances, four held by
// busy pods, two by pods that do nothing and one free, beside one whole GPU
// nobody holds. Each pod must be attributed to its own instance (not to the
// GPU), the inventory must list the instances under their GPU, and the
// stored idle split must equal the one this test counts from what it asked
// the cluster for: per minute with samples, each instance adds 1/7 of a
// GPU-minute to its state and the whole GPU one.
func TestMIGInstancesAttributedToTheirPods(t *testing.T) {
	ctx := t.Context()
	c := harness.NewForTest(t, harness.Options{})
	s := storetest.New(t)
	const (
		node    = "mig-0"
		profile = "1g.10gb"
		slices  = 7 // of an A100's compute
		speed   = 30
	)
	nodes, err := c.AddNodes(ctx, []trace.Node{{Name: node, GPUs: 1, GPUModel: "NVIDIA-A100-SXM4-80GB",
		MIG: map[string]int{"nvidia.com/mig-" + profile: slices}}}, harness.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	utils := map[string]float64{"busy-0": 0.9, "busy-1": 0.8, "busy-2": 0.95, "busy-3": 0.7, "idle-0": 0, "idle-1": 0.01}
	for name, util := range utils {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
				Annotations: map[string]string{harness.AnnotationGPUUtil: strconv.FormatFloat(util, 'f', -1, 64)}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "infer",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					"nvidia.com/mig-" + profile: resource.MustParse("1")}}}}},
		}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
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
		return running == len(utils), nil
	})

	// Accelerated time from here: the pods ran before the first sample, so
	// no minute has waiting demand.
	epoch := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	origin := time.Now()
	toTrace := func(wall time.Time) time.Time { return epoch.Add(time.Duration(float64(wall.Sub(origin)) * speed)) }
	traceNow := func() time.Time { return toTrace(time.Now()) }
	logger := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pipe, err := collector.StartPipeline(context.Background(), collector.PipelineConfig{Store: s,
		Scraper:     &dcgm.ExporterScraper{Targets: dcgm.StaticTargets([]string{nodes.ExporterURL(node)}), Now: traceNow},
		ScrapeEvery: 10 * time.Second / speed, Ingest: collector.IngestOptions{FlushInterval: 50 * time.Millisecond},
		RollupEvery: time.Hour, RollupWindow: 2 * time.Hour, RollupNow: traceNow, InventoryEvery: 100 * time.Millisecond,
		Watch:  &events.WatchOptions{Client: c.Client, Dynamic: c.Dynamic, FlushInterval: 100 * time.Millisecond, MapTime: toTrace},
		Logger: logger})
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
		return traceNow().After(epoch.Add(3*time.Minute + 20*time.Second)), nil
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
		return len(uids) == len(utils), nil
	})
	stop()
	final := &collector.Roller{Store: s, Window: 2 * time.Hour, Lookback: 2 * time.Hour,
		Now: func() time.Time { return traceNow().Add(time.Hour) }}
	if err := final.Once(ctx); err != nil {
		t.Fatal(err)
	}

	// The inventory: the whole GPU, the partitioned GPU, its seven instances.
	inv, err := s.ListGPUs(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	var partitioned string
	instances := 0
	for _, g := range inv {
		if g.Instance != "" {
			instances++
			partitioned = g.UUID
			if g.MIGProfile != profile {
				t.Errorf("inventory instance %+v: profile %q, want %q", g, g.MIGProfile, profile)
			}
		}
	}
	if instances != slices || len(inv) != 2+slices {
		t.Fatalf("inventory of %s = %+v; want a whole GPU, a partitioned one and its %d instances", node, inv, slices)
	}

	// Attribution: one instance per pod, its own, read as busy as the pod is.
	held := map[string]string{}
	for name, util := range utils {
		gpus, err := s.PodGPUs(ctx, uids[name])
		if err != nil {
			t.Fatal(err)
		}
		if len(gpus) != 1 {
			t.Errorf("pod %s held %+v; want one MIG instance", name, gpus)
			continue
		}
		g := gpus[0]
		if g.GPUUUID != partitioned || g.GPUInstance == "" || g.GPUInstanceProfile != profile || math.Abs(g.ComputeShare-1.0/slices) > 1e-6 {
			t.Errorf("pod %s attributed to %+v; want a %s instance of %s holding 1/%d of it", name, g, profile, partitioned, slices)
		}
		if other, dup := held[g.GPUInstance]; dup {
			t.Errorf("pods %s and %s both attributed to instance %s", other, name, g.GPUInstance)
		}
		held[g.GPUInstance] = name
		if math.Abs(g.GrEngineActiveAvg-util) > 1e-6 {
			t.Errorf("pod %s: its instance read %.3f engine-active; the pod ran at %.3f", name, g.GrEngineActiveAvg, util)
		}
	}

	// The split, counted from the test's own description of the node.
	rows, err := s.GPUMinutes(ctx, partitioned, epoch.Add(-time.Hour), epoch.Add(time.Hour))
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
		for _, util := range utils {
			if util >= store.DefaultIdleThreshold {
				want["busy"] += 1.0 / slices
			} else {
				want["allocated_idle"] += 1.0 / slices
			}
		}
		want["spare"] += float64(slices-len(utils))/slices + 1 // the free instance, the whole GPU
	}
	states, err := s.GPUStateMinutes(ctx, epoch.Add(-time.Hour), epoch.Add(time.Hour))
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
