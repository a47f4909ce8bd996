package collector_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/dra"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/store/storetest"
	"github.com/schedloop/schedloop/internal/trace"
)

// uuidSource reports one sample per GPU UUID per call, naming no pod, as
// the DCGM host engine does.
type uuidSource struct {
	uuids []string
	calls atomic.Int32
}

func (u *uuidSource) Collect(context.Context) ([]schedloop.GPUSample, error) {
	// Distinct times per round: samples are keyed by time and GPU.
	at := time.Now().Truncate(time.Second).Add(time.Duration(u.calls.Add(1)) * time.Millisecond)
	var out []schedloop.GPUSample
	for i, id := range u.uuids {
		out = append(out, schedloop.GPUSample{Time: at, GPUUUID: id, Node: "n0", GPUIndex: i, GrEngineActive: 0.5})
	}
	return out, nil
}

// TestDRAGPUSamplesAttributedFromClaims runs the pipeline on a DRA node
// whose telemetry names no pod: samples of the GPU a pod's claim was
// allocated are stored under that pod, those of the free GPU under none.
func TestDRAGPUSamplesAttributedFromClaims(t *testing.T) {
	ctx := t.Context()
	c := harness.NewForTest(t, harness.Options{})
	s := storetest.New(t)
	clock, err := harness.NewClock(60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddNodes(ctx, []trace.Node{{Name: "n0", GPUs: 2, GPUModel: "NVIDIA-H100-80GB-HBM3"}},
		harness.NodeOptions{Clock: clock, DRA: true, NoExporters: true}); err != nil {
		t.Fatal(err)
	}
	sl, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := &uuidSource{}
	for _, sc := range sl.Items {
		devs, _ := dra.Devices(&sc)
		for _, d := range devs {
			if d.GPU() {
				src.uuids = append(src.uuids, d.UUID)
			}
		}
	}
	if len(src.uuids) != 2 {
		t.Fatalf("slices publish GPUs %v, want 2", src.uuids)
	}
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: "default"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpus",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: dra.ClassGPU, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}}
	if _, err := c.Client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer"},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("one-gpu")}},
			Containers: []corev1.Container{{Name: "main", Image: "train:1",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var held string
	waitUntil(t, "the claim allocated", func(ctx context.Context) (bool, error) {
		got, err := c.Client.ResourceV1().ResourceClaims("default").Get(ctx, "one-gpu", metav1.GetOptions{})
		if err != nil || len(got.Status.ReservedFor) == 0 {
			return false, err
		}
		a := dra.AllocatedDevices(got)
		for _, sc := range sl.Items {
			devs, _ := dra.Devices(&sc)
			for _, d := range devs {
				if len(a) == 1 && d.Key() == a[0].Key {
					held = d.UUID
				}
			}
		}
		return held != "", nil
	})

	pipe, err := collector.StartPipeline(context.Background(), collector.PipelineConfig{Store: s,
		Sources: []collector.Source{src}, ScrapeEvery: 50 * time.Millisecond,
		Ingest: collector.IngestOptions{FlushInterval: 50 * time.Millisecond}, RollupEvery: time.Hour, ETAEvery: -1,
		Watch:  &events.WatchOptions{Client: c.Client, FlushInterval: 50 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pipe.Stop(); err != nil {
			t.Errorf("collector pipeline: %v", err)
		}
	}()
	// Owners come from the claims informer's handlers, which can attribute
	// samples before the watcher has seen every informer list; stopping
	// then is a shutdown before start-up ended, which Stop reports.
	waitUntil(t, "the watcher's informers to list", func(context.Context) (bool, error) { return pipe.Ready() == nil, nil })
	byGPU := map[string]map[string]bool{}
	waitUntil(t, "samples of the held GPU stored under its pod", func(ctx context.Context) (bool, error) {
		rows, err := s.Pool().Query(ctx, `SELECT gpu_uuid, pod_namespace || '/' || pod_name || '/' || container FROM gpu_samples`)
		if err != nil {
			return false, err
		}
		defer rows.Close()
		for rows.Next() {
			var id, pod string
			if err := rows.Scan(&id, &pod); err != nil {
				return false, err
			}
			if byGPU[id] == nil {
				byGPU[id] = map[string]bool{}
			}
			byGPU[id][pod] = true
		}
		return byGPU[held]["default/trainer/main"], rows.Err()
	})
	for id, pods := range byGPU {
		for pod := range pods {
			if id != held && pod != "//" {
				t.Errorf("free GPU %s sampled under pod %q", id, pod)
			}
		}
	}
}
