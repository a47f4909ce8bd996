package nodeview_test

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/dra"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/schedplugins/nodeview"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
)

func gpuNode(name string) *framework.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(st.MakeNode().Name(name).Label("rack", "r1").Capacity(map[v1.ResourceName]string{
		v1.ResourceCPU: "64", v1.ResourceMemory: "256Gi", podspec.ResourceGPU: "8"}).Obj())
	return ni
}

func TestCacheRebuildsOnlyChangedNodes(t *testing.T) {
	c := nodeview.NewCache([]string{"rack"}, nil)
	a, b := gpuNode("a"), gpuNode("b")
	first := c.Nodes([]fwk.NodeInfo{a, b})
	b.AddPod(st.MakePod().Name("p").UID("p").Res(map[v1.ResourceName]string{podspec.ResourceGPU: "3"}).Obj())
	second := c.Nodes([]fwk.NodeInfo{a, b})
	if second[0] != first[0] {
		t.Error("unchanged node a was rebuilt")
	}
	if second[1] == first[1] {
		t.Fatal("node b changed but its view was reused")
	}
	if got, want := second[1].IdleGPUs(), 5; got != want {
		t.Errorf("b idle GPUs = %d, want %d", got, want)
	}
	if got := fmt.Sprint(second[1].Domains); got != "[r1]" {
		t.Errorf("b domains = %s, want [r1]", got)
	}
	if fmt.Sprint(*nodeview.Node(a, []string{"rack"}, nil)) != fmt.Sprint(*second[0]) {
		t.Error("cached view differs from a fresh one")
	}
}

func TestCacheDropsRemovedNodes(t *testing.T) {
	c := nodeview.NewCache(nil, nil)
	var many []fwk.NodeInfo
	for i := range 200 {
		many = append(many, gpuNode(fmt.Sprintf("n%03d", i)))
	}
	c.Nodes(many)
	c.Nodes(many[:10])
	if got := c.Len(); got > 10 {
		t.Errorf("cache holds %d views after the cluster shrank to 10 nodes", got)
	}
}

// The view holds each pod's recorded devices, as the simulator's
// allocations do: a share stays on its device after others leave, and a
// device holding a share is not idle for a whole-GPU pod.
func TestNodeHoldsRecordedDevices(t *testing.T) {
	ni := gpuNode("a")
	pod := func(name, res, qty, devices string) *v1.Pod {
		p := st.MakePod().Name(name).UID(name).Res(map[v1.ResourceName]string{v1.ResourceName(res): qty}).Obj()
		if devices != "" {
			p.Annotations = map[string]string{podspec.AnnotationGPUDevices: devices}
		}
		return p
	}
	ni.AddPod(pod("whole", string(podspec.ResourceGPU), "2", "0,5"))
	ni.AddPod(pod("quarter", string(podspec.ResourceGPUMilli), "250", "3"))
	ni.AddPod(pod("half", string(podspec.ResourceGPUMilli), "500", "3"))
	ni.AddPod(pod("elsewhere", string(podspec.ResourceGPUMilli), "600", "")) // no record: tightest fit
	n := nodeview.Node(ni, nil, nil)
	want := []int{0, 400, 1000, 250, 1000, 0, 1000, 1000}
	if fmt.Sprint(n.GPUFree) != fmt.Sprint(want) {
		t.Errorf("GPUFree = %v, want %v", n.GPUFree, want)
	}
	if n.IdleGPUs() != 4 {
		t.Errorf("idle GPUs = %d, want 4 (the framework's count of whole GPUs says 6)", n.IdleGPUs())
	}
}

// Domains are read as the simulator reads an inventory: a node missing a
// level's label, or carrying it empty, has no domain from there down.
func TestDomainsMatchTheSimulator(t *testing.T) {
	levels := []string{"spine", "rack", "nvlink"}
	for _, labels := range []map[string]string{
		{"spine": "s1", "rack": "r1", "nvlink": "n1"},
		{"spine": "s1", "nvlink": "n1"},
		{"spine": "s1", "rack": "", "nvlink": "n1"},
		{},
	} {
		live := nodeview.Domains(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: labels}}, levels)
		inv := trace.Inventory{Levels: append(levels, trace.LabelHostname), Nodes: []trace.Node{{Name: "x", GPUs: 8, Labels: labels}}}
		replayed := sim.NewCluster(inv).Nodes[0].Domains
		if fmt.Sprint(live) != fmt.Sprint(replayed) {
			t.Errorf("labels %v: live domains %v, replayed %v", labels, live, replayed)
		}
	}
}

// Within a pod-group cycle the scheduler tries each member on its snapshot
// and takes the trial back, keeping the node's generation through both: the
// cache must show the trial while it stands and forget it once taken back.
func TestCacheFollowsPodGroupTrials(t *testing.T) {
	node := st.MakeNode().Name("a").Capacity(map[v1.ResourceName]string{
		v1.ResourceCPU: "64", v1.ResourceMemory: "256Gi", podspec.ResourceGPU: "8"}).Obj()
	snap := internalcache.NewSnapshot(nil, []*v1.Node{node})
	c := nodeview.NewCache(nil, nil)
	idle := func() int {
		t.Helper()
		ni, err := snap.Get("a")
		if err != nil {
			t.Fatal(err)
		}
		return c.Node(ni).IdleGPUs()
	}
	if got := idle(); got != 8 {
		t.Fatalf("before the trials: %d idle GPUs, want 8", got)
	}
	trial := func(name string, gpus string) *v1.Pod {
		t.Helper()
		p := st.MakePod().Name(name).UID(name).Node("a").Res(map[v1.ResourceName]string{podspec.ResourceGPU: gpus}).Obj()
		pi, err := framework.NewPodInfo(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := snap.AssumePod(pi); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := trial("m0", "4")
	if got := idle(); got != 4 {
		t.Fatalf("first member tried: %d idle GPUs, want 4", got)
	}
	second := trial("m1", "2")
	if got := idle(); got != 2 {
		t.Fatalf("second member tried: %d idle GPUs, want 2", got)
	}
	for _, p := range []*v1.Pod{second, first} {
		if err := snap.ForgetPod(klog.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	if got := idle(); got != 8 {
		t.Fatalf("trials taken back: %d idle GPUs, want 8", got)
	}
	// Another member tried in the first one's place, of the same size.
	trial("m2", "4")
	if got := idle(); got != 4 {
		t.Fatalf("another member tried: %d idle GPUs, want 4", got)
	}
}

// NodeWithout leaves out the pod being reserved, which a pod-group cycle
// has already assumed on the node.
func TestNodeWithoutLeavesOutThePod(t *testing.T) {
	ni := gpuNode("a")
	ni.AddPod(st.MakePod().Name("other").UID("other").Res(map[v1.ResourceName]string{podspec.ResourceGPU: "2"}).Obj())
	ni.AddPod(st.MakePod().Name("self").UID("self").Res(map[v1.ResourceName]string{podspec.ResourceGPU: "4", v1.ResourceCPU: "8"}).Obj())
	n := nodeview.NodeWithout(ni, nil, nil, "self")
	if got := n.IdleGPUs(); got != 6 {
		t.Errorf("idle GPUs without the pod = %d, want 6", got)
	}
	if got := n.CPUMilliFree; got != 64000 {
		t.Errorf("free CPU without the pod = %d, want 64000", got)
	}
}

// A node's MIG instances are read as the simulator reads an inventory's:
// each profile's allocatable count is its capacity, less what the pods on
// it request; a held pod's allocation gives its instances back on release.
func TestMIGMatchesTheSimulator(t *testing.T) {
	const oneG, threeG = podspec.ResourceMIGPrefix + "1g.10gb", podspec.ResourceMIGPrefix + "3g.40gb"
	ni := framework.NewNodeInfo()
	ni.SetNode(st.MakeNode().Name("a").Capacity(map[v1.ResourceName]string{
		v1.ResourceCPU: "64", v1.ResourceMemory: "256Gi", oneG: "4", threeG: "1"}).Obj())
	ni.AddPod(st.MakePod().Name("p").UID("p").Res(map[v1.ResourceName]string{oneG: "3"}).Obj())
	live, held := nodeview.NodeHeld(ni, nil, nil)

	simulated := sim.NewCluster(trace.Inventory{Nodes: []trace.Node{{Name: "a", CPUMilli: 64000, MemoryMiB: 256 << 10,
		MIG: map[string]int{oneG: 4, threeG: 1}}}}).Nodes[0]
	if _, err := simulated.Allocate(sim.RequestOf(trace.Job{MIG: map[string]int{oneG: 3}}), nil); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(live.MIGCap, live.MIGFree) != fmt.Sprint(simulated.MIGCap, simulated.MIGFree) {
		t.Errorf("live MIG %v free %v, simulated %v free %v", live.MIGCap, live.MIGFree, simulated.MIGCap, simulated.MIGFree)
	}
	if len(held) != 1 {
		t.Fatalf("held = %+v, want the one pod", held)
	}
	live.Release(held[0].Alloc)
	if live.MIGFree["1g.10gb"] != 4 {
		t.Errorf("after releasing the pod: free %v, want all four 1g", live.MIGFree)
	}
	if without := nodeview.NodeWithout(ni, nil, nil, "p"); without.MIGFree["1g.10gb"] != 4 {
		t.Errorf("the node without the pod: free %v, want all four 1g", without.MIGFree)
	}
}

// A node that publishes MIG instances only through DRA holds them as the
// simulator holds an inventory's: each published profile is its capacity,
// less the instances the claims of its pods name by profile; a claim
// naming none takes no instance of the view, and the request it asks is
// counted as scoring counts the simulator's.
func TestDRAMIGMatchesTheSimulator(t *testing.T) {
	const oneG, threeG = "1g.5gb", "3g.20gb"
	mig := func(name, profile string) resourcev1.Device {
		return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			dra.AttrType: {StringValue: ptr.To(dra.TypeMIG)}, dra.AttrUUID: {StringValue: ptr.To("MIG-" + name)},
			dra.AttrProfile: {StringValue: ptr.To(profile)}}}
	}
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "a-mig"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: dra.Driver, NodeName: ptr.To("a"), Pool: resourcev1.ResourcePool{Name: "a", Generation: 1, ResourceSliceCount: 1},
		Devices: []resourcev1.Device{mig("gpu-0-mig-1g5gb-0", oneG), mig("gpu-0-mig-3g20gb-1", threeG), mig("gpu-0-mig-3g20gb-2", threeG)}}}
	template := func(name, cel string) *resourcev1.ResourceClaimTemplate {
		req := &resourcev1.ExactDeviceRequest{DeviceClassName: dra.ClassMIG, Count: 1}
		if cel != "" {
			req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: cel}}}
		}
		return &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "mig", Exactly: req}}}}}}
	}
	f := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	d, err := nodeview.NewDRA(f)
	if err != nil {
		t.Fatal(err)
	}
	// Filled by hand, not started: the view reads the informers' stores.
	if err := f.Resource().V1().ResourceSlices().Informer().GetIndexer().Add(slice); err != nil {
		t.Fatal(err)
	}
	for _, o := range []any{template("three", `device.attributes["gpu.nvidia.com"].profile == "3g.20gb"`), template("any", "")} {
		if err := f.Resource().V1().ResourceClaimTemplates().Informer().GetIndexer().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name, tpl string) *v1.Pod {
		p := st.MakePod().Namespace("ml").Name(name).UID(name).Obj()
		p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "mig", ResourceClaimTemplateName: ptr.To(tpl)}}
		return p
	}
	ni := framework.NewNodeInfo()
	ni.SetNode(st.MakeNode().Name("a").Capacity(map[v1.ResourceName]string{v1.ResourceCPU: "64", v1.ResourceMemory: "256Gi"}).Obj())
	named, unnamed := pod("named", "three"), pod("unnamed", "any")
	ni.AddPod(named)
	ni.AddPod(unnamed)
	live, held := nodeview.NodeHeld(ni, nil, d)

	job := trace.Job{MIG: map[string]int{podspec.ResourceMIGPrefix + threeG: 1}}
	simulated := sim.NewCluster(trace.Inventory{Nodes: []trace.Node{{Name: "a", CPUMilli: 64000, MemoryMiB: 256 << 10,
		MIG: map[string]int{podspec.ResourceMIGPrefix + oneG: 1, podspec.ResourceMIGPrefix + threeG: 2}}}}).Nodes[0]
	if _, err := simulated.Allocate(sim.RequestOf(job), nil); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(live.MIGCap, live.MIGFree) != fmt.Sprint(simulated.MIGCap, simulated.MIGFree) {
		t.Errorf("live MIG %v free %v, simulated %v free %v", live.MIGCap, live.MIGFree, simulated.MIGCap, simulated.MIGFree)
	}
	if got, want := podspec.RequestWith(named, d).CountedMilli(), sim.RequestOf(job).CountedMilli(); got != want {
		t.Errorf("a claim for one 3g instance counts %d milli-GPU live, %d simulated", got, want)
	}
	if len(held) != 2 {
		t.Fatalf("held = %+v, want both pods", held)
	}
	for _, h := range held {
		live.Release(h.Alloc)
	}
	if live.MIGFree[threeG] != 2 || live.MIGFree[oneG] != 1 {
		t.Errorf("after releasing the pods: free %v, want every instance", live.MIGFree)
	}
	if without := nodeview.NodeWithout(ni, nil, d, "named"); without.MIGFree[threeG] != 2 {
		t.Errorf("the node without the named pod: free %v, want both 3g", without.MIGFree)
	}
}
