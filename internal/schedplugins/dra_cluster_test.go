package schedplugins_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/dra"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/schedplugins"
	"github.com/schedloop/schedloop/internal/trace"
)

// newDRAEnv is newEnv with the nodes' GPUs published through DRA only.
func newDRAEnv(t *testing.T, nodes []trace.Node, profileYAML string) *env {
	t.Helper()
	c := harness.NewForTest(t, harness.Options{WorkloadAPI: true})
	ctx := t.Context()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	e := &env{t: t, c: c}
	if profileYAML != "" {
		e.setProfile(profileYAML)
	}
	if _, err := c.AddNodes(ctx, nodes, harness.NodeOptions{NoExporters: true, Heartbeat: time.Minute, DRA: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{
		Config: schedulerConfig(t, c.Kubeconfig), Plugins: schedplugins.NewSet().Options(),
	}); err != nil {
		t.Fatal(err)
	}
	return e
}

// viaClaim makes a pod ask for its GPUs through a ResourceClaimTemplate of
// that many whole GPUs instead of nvidia.com/gpu.
func (e *env) viaClaim(p *corev1.Pod) {
	q := p.Spec.Containers[0].Resources.Limits[harness.ResourceGPU]
	delete(p.Spec.Containers[0].Resources.Limits, harness.ResourceGPU)
	name := "gpus-" + q.String()
	tpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: dra.ClassGPU, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: q.Value(),
			}}},
		}}},
	}
	if _, err := e.c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(e.t.Context(), tpl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(name)}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
}

// TestDRAGangLandsInOneNVLinkClique: on nodes that offer GPUs only through
// DRA and carry no NVLink-domain label, a gang asking through claim
// templates is planned by the clique its GPUs publish, and lands inside one.
func TestDRAGangLandsInOneNVLinkClique(t *testing.T) {
	nodes := rackNodes()
	for i := range nodes {
		clique := nodes[i].Labels[trace.LabelNVLinkDomain]
		delete(nodes[i].Labels, trace.LabelNVLinkDomain)
		// GPU feature discovery's clique label, not a topology level: the
		// simulated driver publishes it on each GPU, as NVIDIA's fabric
		// reports it to both.
		nodes[i].Labels[harness.LabelGPUClique] = clique
	}
	e := newDRAEnv(t, nodes, "")
	e.gang("train", ours, 4, 8, 0, e.viaClaim)
	bound := e.waitBound("train-", 4)
	want := []string{"h06", "h07", "h08", "h09"} // clique r2a
	if got := nodesOf(bound); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("gang of 4x8 DRA GPUs on %v, want NVLink clique r2a %v", got, want)
	}
}

// TestDRAQueueLimitCountsClaimGPUs: a queue's GPU limit counts GPUs asked
// for through ResourceClaims as it counts nvidia.com/gpu.
func TestDRAQueueLimitCountsClaimGPUs(t *testing.T) {
	e := newDRAEnv(t, gpuNodes("n", 4, nil), teamA16Profile)
	for i := range 6 {
		e.pod("a-"+string(rune('0'+i)), ours, 4, inQueue("team-a"), e.viaClaim)
	}
	e.waitBound("a-", 4)
	var waiting string
	bound, _ := e.placement("a-")
	for i := range 6 {
		if name := "a-" + string(rune('0'+i)); bound[name] == "" {
			waiting = name
			break
		}
	}
	e.waitReason(waiting, "queue team-a at limit 16 GPUs")
	if bound, pending := e.placement("a-"); len(bound) != 4 || pending != 2 {
		t.Fatalf("queue team-a: %d bound, %d pending; want 4 (16 DRA GPUs) and 2", len(bound), pending)
	}
}
