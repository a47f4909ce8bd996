package harness_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/dra"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/player"
	"github.com/schedloop/schedloop/internal/trace"
)

// claimTemplate asks for count devices of class.
func claimTemplate(name, class string, count int64) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count,
			}}},
		}}},
	}
}

func claimPod(name, template string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: ann},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(template)}},
			Containers: []corev1.Container{{Name: "main", Image: "train:1", Resources: corev1.ResourceRequirements{
				Claims: []corev1.ResourceClaim{{Name: "gpus"}},
			}}},
		},
	}
}

// TestDRADriver runs pods whose GPUs the stock kube-scheduler allocates
// through DRA from the simulated driver's slices: through a claim template,
// through nvidia.com/gpu served by DRA, and a MIG instance; the runner
// starts each on the devices allocated, marks them prepared, and frees them.
func TestDRADriver(t *testing.T) {
	c := harness.NewForTest(t, harness.Options{})
	ctx := t.Context()
	clock, err := harness.NewClock(60)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := c.AddNodes(ctx, []trace.Node{
		{Name: "n0", GPUs: 4, GPUModel: "NVIDIA-H100-80GB-HBM3", Labels: map[string]string{trace.LabelNVLinkDomain: "nvl-a"}},
		{Name: "m0", GPUs: 2, GPUModel: "NVIDIA-H100-80GB-HBM3", MIG: map[string]int{"nvidia.com/mig-1g.10gb": 7}},
	}, harness.NodeOptions{Clock: clock, Heartbeat: 200 * time.Millisecond, DRA: true})
	if err != nil {
		t.Fatal(err)
	}
	n0, err := c.Client.CoreV1().Nodes().Get(ctx, "n0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n0.Status.Allocatable[harness.ResourceGPU]; ok {
		t.Errorf("DRA node n0 advertises %s: %v", harness.ResourceGPU, n0.Status.Allocatable)
	}
	sl, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ptrs []*resourcev1.ResourceSlice
	for i := range sl.Items {
		ptrs = append(ptrs, &sl.Items[i])
	}
	inv := dra.NewInventory(ptrs)
	if len(inv.Problems) > 0 {
		t.Errorf("inventory problems: %v", inv.Problems)
	}
	if inv.GPUs("n0") != 4 || inv.GPUs("m0") != 2 {
		t.Errorf("GPUs published: n0 %d m0 %d, want 4 and 2", inv.GPUs("n0"), inv.GPUs("m0"))
	}
	var migs int
	for _, d := range inv.Node("m0") {
		if d.Type == dra.TypeMIG {
			migs++
			if d.Profile != "1g.10gb" || d.ParentUUID == "" || !strings.HasPrefix(d.UUID, "MIG-") {
				t.Errorf("MIG device %+v", d)
			}
		}
	}
	if migs != 7 { // seven 1g instances on one partitioned GPU
		t.Errorf("m0 publishes %d MIG devices, want 7", migs)
	}
	for _, d := range inv.Node("n0") {
		if d.Clique != "nvl-a" || !d.HasNUMA || d.PCIeRoot == "" || d.Product != "NVIDIA H100 80GB HBM3" || d.MemoryBytes != 81559<<20 {
			t.Errorf("n0 device %+v", d)
		}
	}

	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{}); err != nil {
		t.Fatal(err)
	}
	rc := c.Client.ResourceV1()
	for _, tpl := range []*resourcev1.ResourceClaimTemplate{claimTemplate("two-gpus", dra.ClassGPU, 2), claimTemplate("one-mig", dra.ClassMIG, 1)} {
		if _, err := rc.ResourceClaimTemplates("default").Create(ctx, tpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := c.Client.CoreV1().Pods("default")
	mk := func(p *corev1.Pod) {
		t.Helper()
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk(claimPod("tpl", "two-gpus", nil))
	mk(claimPod("mig", "one-mig", nil))
	ext := gpuPod("ext", "", 1, map[string]string{harness.AnnotationDuration: "1m"})
	mk(ext)

	running := func(name string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, nil
		}
	}
	for _, name := range []string{"tpl", "mig", "ext"} {
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, running(name)); err != nil {
			p, _ := pods.Get(ctx, name, metav1.GetOptions{})
			ev, _ := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
			var msgs []string
			for _, e := range ev.Items {
				msgs = append(msgs, e.InvolvedObject.Name+": "+e.Reason+": "+e.Message)
			}
			t.Fatalf("%s does not run: %+v\nevents: %s", name, p.Status, strings.Join(msgs, "\n"))
		}
	}

	// tpl's claim: two whole GPUs of one node, reserved for it and prepared.
	tpl, _ := pods.Get(ctx, "tpl", metav1.GetOptions{})
	if len(tpl.Status.ResourceClaimStatuses) != 1 || tpl.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("tpl claim statuses %+v", tpl.Status.ResourceClaimStatuses)
	}
	claimName := *tpl.Status.ResourceClaimStatuses[0].ResourceClaimName
	var claim *resourcev1.ResourceClaim
	waitFor(t, "tpl's devices prepared", 10*time.Second, func(ctx context.Context) (bool, error) {
		claim, err = rc.ResourceClaims("default").Get(ctx, claimName, metav1.GetOptions{})
		return err == nil && len(claim.Status.Devices) == 2, err
	})
	alloc := dra.AllocatedDevices(claim)
	if len(alloc) != 2 || alloc[0].Key.Pool != tpl.Spec.NodeName || !dra.ReservedFor(claim, string(tpl.UID)) {
		t.Fatalf("tpl allocation %+v on %s", alloc, tpl.Spec.NodeName)
	}
	var want []string
	for _, a := range alloc {
		d, ok := inv.Device(a.Key)
		if !ok || !d.GPU() {
			t.Fatalf("allocated %v is no published GPU", a.Key)
		}
		want = append(want, d.UUID)
	}
	var got []string
	for _, g := range nodes.GPUs(tpl.Spec.NodeName) {
		if g.Pod == "tpl" {
			got = append(got, g.UUID)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("exporter shows tpl on %v, its claim holds %v", got, want)
	}

	// mig: one MIG instance of m0.
	mig, _ := pods.Get(ctx, "mig", metav1.GetOptions{})
	if mig.Spec.NodeName != "m0" {
		t.Errorf("mig placed on %s, only m0 has MIG devices", mig.Spec.NodeName)
	}
	var held []string
	for _, g := range nodes.GPUs("m0") {
		if g.Pod == "mig" {
			held = append(held, g.Profile+"/"+g.Instance)
		}
	}
	if len(held) != 1 || !strings.HasPrefix(held[0], "1g.10gb/") {
		t.Errorf("exporter shows mig on %v, want one 1g.10gb instance", held)
	}
	// ext: nvidia.com/gpu served through the claim the scheduler made.
	extPod, _ := pods.Get(ctx, "ext", metav1.GetOptions{})
	if st := extPod.Status.ExtendedResourceClaimStatus; st == nil || st.ResourceClaimName == "" {
		t.Fatalf("ext has no extended-resource claim: %+v", extPod.Status)
	}

	// ext ends after its minute (a wall second): the runner frees its GPU
	// and the controller releases the claim.
	waitFor(t, "ext to succeed", 20*time.Second, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, "ext", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodSucceeded, nil
	})
	for _, g := range nodes.GPUs(extPod.Spec.NodeName) {
		if g.Pod == "ext" {
			t.Errorf("GPU %d still held by ext after it ended", g.Index)
		}
	}
	waitFor(t, "ext's claim released", 20*time.Second, func(ctx context.Context) (bool, error) {
		c, err := rc.ResourceClaims("default").Get(ctx, extPod.Status.ExtendedResourceClaimStatus.ResourceClaimName, metav1.GetOptions{})
		return err != nil || len(c.Status.ReservedFor) == 0, nil
	})
}

// TestReplayThroughClaims replays a trace whose members ask for their GPUs
// through claim templates on DRA nodes: every job ends, each member's pod
// named its count's template, and no GPU is left held.
func TestReplayThroughClaims(t *testing.T) {
	c := harness.NewForTest(t, harness.Options{})
	ctx := t.Context()
	clock, err := harness.NewClock(300)
	if err != nil {
		t.Fatal(err)
	}
	inv := testInventory(t, 8)
	nodes, err := c.AddNodes(ctx, inv.Nodes, harness.NodeOptions{Clock: clock, DRA: true, NoExporters: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{}); err != nil {
		t.Fatal(err)
	}
	jobs := trace.Generate(trace.GenConfig{
		Seed: 5, Jobs: 30, MeanInterarrival: 10 * time.Second,
		MinDuration: 2 * time.Minute, MaxDuration: 10 * time.Minute,
		GangSizes: []int{1, 1, 2}, GPUsPerMember: []int{1, 2, 4, 8},
	})
	p, err := player.New(c.Client, c.Dynamic, jobs, player.Options{Clock: clock, GPUClaims: true})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	rep, err := p.Run(runCtx)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	for _, r := range rep.Jobs {
		if !r.Done() {
			t.Errorf("job %s not done", r.Name)
		}
	}
	list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range list.Items {
		if len(pod.Spec.ResourceClaims) != 1 || !strings.HasPrefix(*pod.Spec.ResourceClaims[0].ResourceClaimTemplateName, "schedloop-gpus-") {
			t.Errorf("pod %s asks %v, want one claim template", pod.Name, pod.Spec.ResourceClaims)
		}
		if _, ok := pod.Spec.Containers[0].Resources.Limits[harness.ResourceGPU]; ok {
			t.Errorf("pod %s still asks for %s", pod.Name, harness.ResourceGPU)
		}
	}
	// The runner counts a pod finished before its status write, so by the
	// time the player saw the last pod end every count is in.
	if nodes.PodsStarted() == 0 || nodes.PodsStarted() != nodes.PodsFinished() {
		t.Errorf("%d pods started, %d finished", nodes.PodsStarted(), nodes.PodsFinished())
	}
	for _, name := range nodes.Names() {
		for _, g := range nodes.GPUs(name) {
			if g.Pod != "" {
				t.Errorf("%s GPU %d still held by %s", name, g.Index, g.Pod)
			}
		}
	}
	t.Logf("%d jobs, %d pods through claims in %v", len(rep.Jobs), nodes.PodsStarted(), rep.Ended.Sub(rep.Began).Round(time.Millisecond))
}
