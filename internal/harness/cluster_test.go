package harness_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/trace"
)

func TestClusterServesAndWritesKubeconfig(t *testing.T) {
	t.Parallel()
	c := harness.NewForTest(t, harness.Options{})
	ctx := t.Context()
	t.Logf("start-up %v", c.StartupTime)

	// The kubeconfig on disk is enough for a fresh client.
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("get default namespace through kubeconfig: %v", err)
	}

	// PodGroups are served.
	pg := podgroup.New("default", "gang", 4)
	pg.Spec.ScheduleTimeoutSeconds = ptr.To[int32](30)
	if _, err := podgroup.Create(ctx, c.Dynamic, pg); err != nil {
		t.Fatal(err)
	}
	got, err := podgroup.Get(ctx, c.Dynamic, "default", "gang")
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.MinMember != 4 || *got.Spec.ScheduleTimeoutSeconds != 30 {
		t.Fatalf("podgroup round trip: %+v", got.Spec)
	}
	got.Status.Phase = podgroup.PhaseRunning
	got.Status.Running = 4
	if _, err := podgroup.UpdateStatus(ctx, c.Dynamic, got); err != nil {
		t.Fatal(err)
	}
	bad := podgroup.New("default", "bad", -1)
	if _, err := podgroup.Create(ctx, c.Dynamic, bad); err == nil || !strings.Contains(err.Error(), "minMember") {
		t.Fatalf("minMember -1 accepted: %v", err)
	}
}

// waitFor polls cond until it holds or the test's time runs out.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func gpuPod(name, node string, gpus int64, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: ann},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{Name: "main", Image: "train:1", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{harness.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)},
			}}},
		},
	}
}

func TestPodLifecycle(t *testing.T) {
	t.Parallel()
	c := harness.NewForTest(t, harness.Options{})
	ctx := t.Context()
	clock, err := harness.NewClock(60) // a minute of trace per second
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := c.AddNodes(ctx, []trace.Node{
		{Name: "n0", GPUs: 8, GPUModel: "NVIDIA-H100-80GB-HBM3", MIG: map[string]int{"nvidia.com/mig-1g.10gb": 7}},
		{Name: "n1", GPUs: 2, GPUModel: "NVIDIA-A100-SXM4-40GB"},
	}, harness.NodeOptions{Clock: clock, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	n0, err := c.Client.CoreV1().Nodes().Get(ctx, "n0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := n0.Status.Allocatable[harness.ResourceGPU]; q.Value() != 8 {
		t.Errorf("n0 allocatable GPUs %v, want 8", q.String())
	}
	if q := n0.Status.Allocatable["nvidia.com/mig-1g.10gb"]; q.Value() != 7 {
		t.Errorf("n0 allocatable MIG %v, want 7", q.String())
	}
	if n0.Labels[harness.LabelGPUProduct] != "NVIDIA-H100-80GB-HBM3" || n0.Annotations[harness.AnnotationExporter] == "" {
		t.Errorf("n0 labels %v annotations %v", n0.Labels, n0.Annotations)
	}
	// The heartbeat keeps moving the Ready condition.
	first := readyHeartbeat(t, c, "n0")
	waitFor(t, "a heartbeat", 10*time.Second, func(ctx context.Context) (bool, error) {
		return readyHeartbeat(t, c, "n0").After(first.Time), nil
	})

	pods := c.Client.CoreV1().Pods("default")
	// 2 minutes of trace time: 2 wall seconds.
	if _, err := pods.Create(ctx, gpuPod("ok", "n0", 4, map[string]string{harness.AnnotationDuration: "2m"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, gpuPod("fails", "n1", 1, map[string]string{harness.AnnotationDuration: "1m", harness.AnnotationOutcome: "Failed"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, gpuPod("forever", "n1", 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, gpuPod("toobig", "n1", 4, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	phase := func(name string) corev1.PodPhase {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return p.Status.Phase
	}
	waitFor(t, "ok to run", 10*time.Second, func(context.Context) (bool, error) { return phase("ok") == corev1.PodRunning, nil })
	held := 0
	for _, g := range nodes.GPUs("n0") {
		if g.Pod == "ok" {
			held++
		}
	}
	if held != 4 {
		t.Errorf("ok holds %d GPUs of n0, want 4", held)
	}
	waitFor(t, "ok to succeed", 20*time.Second, func(context.Context) (bool, error) { return phase("ok") == corev1.PodSucceeded, nil })
	waitFor(t, "fails to fail", 20*time.Second, func(context.Context) (bool, error) { return phase("fails") == corev1.PodFailed, nil })
	waitFor(t, "toobig to be refused", 10*time.Second, func(context.Context) (bool, error) { return phase("toobig") == corev1.PodFailed, nil })
	if p, _ := pods.Get(ctx, "toobig", metav1.GetOptions{}); p.Status.Reason != "UnexpectedAdmissionError" {
		t.Errorf("toobig reason %q", p.Status.Reason)
	}
	for _, g := range nodes.GPUs("n0") {
		if g.Pod != "" {
			t.Errorf("GPU %d of n0 still held by %s after it finished", g.Index, g.Pod)
		}
	}
	// Deletion: the runner finishes it like a kubelet and frees the GPU.
	waitFor(t, "forever to run", 10*time.Second, func(context.Context) (bool, error) { return phase("forever") == corev1.PodRunning, nil })
	if err := pods.Delete(ctx, "forever", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "forever to be gone", 10*time.Second, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, "forever", metav1.GetOptions{})
		return err != nil, nil
	})
	for _, g := range nodes.GPUs("n1") {
		if g.Pod != "" {
			t.Errorf("GPU %d of n1 still held by %s after deletion", g.Index, g.Pod)
		}
	}
}

func readyHeartbeat(t *testing.T, c *harness.Cluster, node string) metav1.Time {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status != corev1.ConditionTrue {
				t.Fatalf("node %s not Ready: %+v", node, cond)
			}
			return cond.LastHeartbeatTime
		}
	}
	t.Fatalf("node %s has no Ready condition", node)
	return metav1.Time{}
}
