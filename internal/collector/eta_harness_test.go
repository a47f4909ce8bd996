package collector_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/eta"
	"github.com/schedloop/schedloop/internal/etaserve"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
	"github.com/schedloop/schedloop/internal/trace"
)

// The estimate test's pace: at speed 20 a history job of 30 trace seconds
// runs 1.5 wall seconds, so 22 of them one after another take about 35.
const (
	etaSpeed   = 20.0
	etaRun     = 30 * time.Second // trace time
	etaHistory = 22               // over eta.MinErrorSamples, so the error is measured
	etaGPUs    = 8
	etaNode    = "gpu-0"
)

// etaSkew is how far apart the stored start and the estimate may lie beyond
// the estimate's own p10..p90, in trace time. The collector stamps a bind
// with the watcher's reading of it (the apiserver keeps only the second),
// the pod runner starts and ends a pod on its own watch, and the scheduler
// binds the waiting pod on its own watch of the ended one: each a few tens
// of wall milliseconds on a loaded 2-core machine. 0.25 s wall covers them
// with room and is 5 trace seconds here, a sixth of the run time, so an
// estimate off by a run would still fail.
var etaSkew = time.Duration(0.25 * etaSpeed * float64(time.Second))

// TestPendingEstimateOnTheHarness runs the collector against the harness
// (one 8-GPU node, the stock kube-scheduler) while jobs of one family run
// there one after another for a fixed time, so the store holds their
// history as the collector recorded it. Then one of the family runs and
// another waits for it: the estimate Service.Pending makes from the store
// must put the waiting job's start, as the collector then stores it,
// within its p10..p90. A what-if for more GPUs than the node has must say
// it never fits and create nothing.
func TestPendingEstimateOnTheHarness(t *testing.T) {
	ctx := t.Context()
	c := harness.NewForTest(t, harness.Options{})
	s := storetest.New(t)

	nodeClock, err := harness.NewClock(etaSpeed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddNodes(ctx, []trace.Node{{Name: etaNode, GPUs: etaGPUs, GPUModel: "NVIDIA-H100-80GB-HBM3",
		GPUMemoryMiB: 81559, CPUMilli: 192000, MemoryMiB: 2 << 20}}, harness.NodeOptions{Clock: nodeClock, NoExporters: true}); err != nil {
		t.Fatal(err)
	}
	// Retrying after one wall second (the floor) so the waiting pod waits
	// for GPUs, not for the scheduler's backoff.
	schedCfg := fmt.Sprintf(harness.DefaultSchedulerConfig, c.Kubeconfig) + "podInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 1\n"
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{Config: schedCfg}); err != nil {
		t.Fatal(err)
	}

	// Trace time, the axis the collector stamps and the estimate reads.
	epoch := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	origin := time.Now()
	toTrace := func(wall time.Time) time.Time {
		return epoch.Add(time.Duration(float64(wall.Sub(origin)) * etaSpeed))
	}
	traceNow := func() time.Time { return toTrace(time.Now()) }
	logger := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pipe, err := collector.StartPipeline(context.Background(), collector.PipelineConfig{Store: s,
		RollupEvery: time.Hour, RollupWindow: 2 * time.Hour, RollupNow: func() time.Time { return toTrace(time.Now()) },
		InventoryEvery: 100 * time.Millisecond,
		Watch:          &events.WatchOptions{Client: c.Client, Dynamic: c.Dynamic, FlushInterval: 50 * time.Millisecond, MapTime: toTrace},
		Logger:         logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pipe.Stop(); err != nil {
			t.Errorf("collector pipeline: %v", err)
		}
	})
	waitUntil(t, "the watcher's informers to list", func(context.Context) (bool, error) { return pipe.Ready() == nil, nil })

	pods := c.Client.CoreV1().Pods("default")
	submit := func(name string) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
				Annotations: map[string]string{harness.AnnotationDuration: etaRun.String()}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "train",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					harness.ResourceGPU: resource.MustParse(strconv.Itoa(etaGPUs))}}}}},
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	phase := func(name string, want corev1.PodPhase) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Status.Phase == corev1.PodFailed {
				return false, fmt.Errorf("pod %s failed: %s", name, p.Status.Message)
			}
			return p.Status.Phase == want, nil
		}
	}
	// stored is the stored job of a pod, by name, once the collector has it.
	stored := func(ctx context.Context, name string) (schedloop.Job, bool, error) {
		open, err := s.OpenJobs(ctx, epoch.Add(-time.Hour))
		if err != nil {
			return schedloop.Job{}, false, err
		}
		for _, j := range open {
			if j.Name == name {
				return j.Job, true, nil
			}
		}
		return schedloop.Job{}, false, nil
	}

	// History: the family runs one job at a time.
	for i := range etaHistory {
		name := fmt.Sprintf("train-%d", i)
		submit(name)
		waitUntil(t, name+" to succeed", phase(name, corev1.PodSucceeded))
	}
	waitUntil(t, "the history to be stored finished", func(ctx context.Context) (bool, error) {
		hist, err := s.JobHistory(ctx, epoch.Add(-time.Hour), traceNow().Add(time.Hour))
		if err != nil {
			return false, err
		}
		done := 0
		for _, j := range hist {
			if !j.Finished.IsZero() {
				done++
			}
		}
		return done == etaHistory, nil
	})

	// One runs; the next must wait for its GPUs.
	running, waiting := fmt.Sprintf("train-%d", etaHistory), fmt.Sprintf("train-%d", etaHistory+1)
	submit(running)
	waitUntil(t, running+" to run", phase(running, corev1.PodRunning))
	submit(waiting)
	var est etaserve.JobETA
	svc := etaserve.Service{Store: s, Now: traceNow, Seed: 1}
	waitUntil(t, "an estimate of "+waiting+" while it waits", func(ctx context.Context) (bool, error) {
		r, ok, err := stored(ctx, running)
		if err != nil || !ok || r.Admitted.IsZero() {
			return false, err
		}
		w, ok, err := stored(ctx, waiting)
		if err != nil || !ok {
			return false, err
		}
		if !w.Admitted.IsZero() {
			return false, fmt.Errorf("%s started at %v before it was estimated waiting", waiting, w.Admitted)
		}
		a, err := svc.Pending(ctx)
		if err != nil {
			return false, err
		}
		for _, j := range a.Jobs {
			if j.Name == waiting {
				est = j
				return true, nil
			}
		}
		return false, fmt.Errorf("estimate %+v lacks the waiting %s", a.Jobs, waiting)
	})
	if est.State != eta.Starts || est.P10 == nil || est.P90 == nil {
		t.Fatalf("estimate of %s: %+v; want a start with p10 and p90", waiting, est)
	}
	if len(est.WaitsFor) == 0 || len(est.Nodes) != 1 || est.Nodes[0] != etaNode {
		t.Errorf("estimate of %s: waits for %v on %v; want it waiting for %s's GPUs on %s", waiting, est.WaitsFor, est.Nodes, running, etaNode)
	}
	t.Logf("%s: predicted run %.1fs, start p10 %s p50 %s p90 %s", waiting, est.PredictedRunSecs,
		est.P10.Format("15:04:05.000"), est.P50.Format("15:04:05.000"), est.P90.Format("15:04:05.000"))

	var started time.Time
	waitUntil(t, waiting+"'s start to be stored", func(ctx context.Context) (bool, error) {
		row := s.Pool().QueryRow(ctx, `SELECT admitted_at FROM jobs WHERE name = $1 AND admitted_at IS NOT NULL`, waiting)
		if err := row.Scan(&started); err != nil {
			return false, nil
		}
		return true, nil
	})
	t.Logf("%s: stored start %s", waiting, started.Format("15:04:05.000"))
	if started.Before(est.P10.Add(-etaSkew)) || started.After(est.P90.Add(etaSkew)) {
		t.Errorf("%s started at %s, outside its estimate p10 %s .. p90 %s (tolerance %v)", waiting,
			started.Format("15:04:05.000"), est.P10.Format("15:04:05.000"), est.P90.Format("15:04:05.000"), etaSkew)
	}
	// The family's run time never varies, so the median is the start but
	// for the stamping skew: p10..p90 alone is wide enough (the first jobs,
	// estimated before any history, widen the measured error) to pass an
	// estimate made on a clock a run ahead.
	if d := started.Sub(*est.P50); d.Abs() > etaSkew {
		t.Errorf("%s started at %s, %v from its estimate's p50 %s (tolerance %v)", waiting,
			started.Format("15:04:05.000"), d, est.P50.Format("15:04:05.000"), etaSkew)
	}

	// A what-if for more GPUs than any node has: never fits, nothing made.
	before, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	openBefore, err := s.OpenJobs(ctx, epoch.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: train-huge, namespace: default}
spec:
  containers:
  - name: main
    image: train
    resources: {limits: {nvidia.com/gpu: %d}}
`, 2*etaGPUs)
	job, err := etaserve.JobFromManifest([]byte(manifest), 0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := svc.WhatIf(ctx, etaserve.Change{Add: &job})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Jobs) != 1 || a.Jobs[0].State != eta.NeverFits || a.Jobs[0].Reason == "" {
		t.Errorf("what-if of %d GPUs on one %d-GPU node: %+v; want one job that never fits, with its reason", 2*etaGPUs, etaGPUs, a.Jobs)
	} else {
		t.Logf("what-if: %s: %s", a.Jobs[0].State, a.Jobs[0].Reason)
	}
	after, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	openAfter, err := s.OpenJobs(ctx, epoch.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if podNames(before.Items) != podNames(after.Items) {
		t.Errorf("pods before the what-if %s, after %s; it must create nothing", podNames(before.Items), podNames(after.Items))
	}
	if fmt.Sprint(jobNames(openBefore)) != fmt.Sprint(jobNames(openAfter)) {
		t.Errorf("open jobs before the what-if %v, after %v; it must store nothing", jobNames(openBefore), jobNames(openAfter))
	}
}

func podNames(ps []corev1.Pod) string {
	out := ""
	for _, p := range ps {
		out += p.Name + " "
	}
	return out
}

func jobNames(js []store.OpenJob) []string {
	out := make([]string, 0, len(js))
	for _, j := range js {
		out = append(out, j.UID+"/"+j.Name)
	}
	return out
}
