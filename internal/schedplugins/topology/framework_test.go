package topology_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/schedplugins/nodeview"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/schedplugins/topology"
	"github.com/schedloop/schedloop/internal/scoring"
)

func gpuPod(name, gpus string) *v1.Pod {
	return st.MakePod().Namespace("default").Name(name).UID(name).
		Res(map[v1.ResourceName]string{v1.ResourceCPU: "4", podspec.ResourceGPU: gpus}).Obj()
}

func cpuPod(name string) *v1.Pod {
	return st.MakePod().Namespace("default").Name(name).UID(name).Req(map[v1.ResourceName]string{v1.ResourceCPU: "2"}).Obj()
}

func node(name string, pods ...*v1.Pod) *framework.NodeInfo {
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(st.MakeNode().Name(name).Label("topology.schedloop.io/rack", "r0").Capacity(map[v1.ResourceName]string{
		v1.ResourceCPU: "128", v1.ResourceMemory: "1Ti", podspec.ResourceGPU: "8"}).Obj())
	return ni
}

// scores runs PreScore and Score for pod over nodes as the framework does.
func scores(t *testing.T, p *topology.Topology, pod *v1.Pod, nodes []fwk.NodeInfo) map[string]int64 {
	t.Helper()
	state := framework.NewCycleState()
	if s := p.PreScore(context.Background(), state, pod, nodes); !s.IsSuccess() {
		t.Fatalf("PreScore: %v", s)
	}
	out := map[string]int64{}
	for _, ni := range nodes {
		v, s := p.Score(context.Background(), state, pod, ni)
		if !s.IsSuccess() {
			t.Fatalf("Score %s: %v", ni.Node().Name, s)
		}
		out[ni.Node().Name] = v
	}
	return out
}

// The node the plugin scores highest is the node internal/scoring picks
// (Scorer, then Best) from the same views: the live scheduler and the
// simulator agree.
func TestScoreWinnerIsScoringsChoice(t *testing.T) {
	tests := []struct {
		name  string
		pod   *v1.Pod
		nodes []fwk.NodeInfo
	}{
		{"one GPU prefers the partly used node", gpuPod("p", "1"),
			[]fwk.NodeInfo{node("a"), node("b", gpuPod("x", "3")), node("c", gpuPod("y", "7"))}},
		{"eight GPUs need an idle node", gpuPod("p", "8"),
			[]fwk.NodeInfo{node("a", gpuPod("x", "1")), node("b"), node("c")}},
		{"a CPU pod among equal nodes goes to the first name", cpuPod("p"),
			[]fwk.NodeInfo{node("c"), node("b"), node("a")}},
		{"a CPU pod avoids stranding GPUs", cpuPod("p"),
			[]fwk.NodeInfo{node("a", cpuPod("x")), node("b", gpuPod("y", "8"))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			holder := profilewatch.NewHolder()
			p, err := topology.New(nil, nil, nil, holder, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := scores(t, p, tc.pod, tc.nodes)

			s := &scoring.Scorer{Weights: holder.Load().Params.Weights}
			req := podspec.Request(tc.pod)
			var names []string
			var raw []float64
			for _, ni := range tc.nodes {
				n := nodeview.Node(ni, topology.DefaultLevels, nil)
				v := -1.0
				if n.Fit(req) == scoring.Fits {
					v, _ = s.Score(n, req)
				}
				names = append(names, n.Name)
				raw = append(raw, v)
			}
			want := names[scoring.Best(names, raw)]
			for name, v := range got {
				if name != want && v >= got[want] {
					t.Errorf("scores %v: %s (%d) not below scoring's choice %s (%d)", got, name, v, want, got[want])
				}
			}
		})
	}
}

// Cached views follow the NodeInfo: once a node changes (its generation
// moves on) the next cycle scores what is on it now.
func TestScoreFollowsNodeChanges(t *testing.T) {
	p, err := topology.New(nil, nil, nil, profilewatch.NewHolder(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := node("a"), node("b")
	nodes := []fwk.NodeInfo{a, b}
	pod := gpuPod("p", "1")
	first := scores(t, p, pod, nodes)
	if first["a"] <= first["b"] {
		t.Fatalf("equal idle nodes: want a (first name) ahead, got %v", first)
	}
	// b gets a 4-GPU pod: packing now prefers b.
	b.AddPod(gpuPod("x", "4"))
	second := scores(t, p, pod, nodes)
	if second["b"] <= second["a"] {
		t.Errorf("after b got a pod: want b ahead, got %v (before %v)", second, first)
	}
	// Fill b: a single GPU no longer fits there and a wins again.
	b.AddPod(gpuPod("y", "4"))
	third := scores(t, p, pod, nodes)
	if third["a"] <= third["b"] {
		t.Errorf("after b filled up: want a ahead, got %v", third)
	}
}

// A plugin that remembers scores between cycles scores exactly as one built
// fresh for every cycle, through pods of changing shapes, nodes filling and
// emptying, and a profile swap.
func TestRememberedScoresMatchFreshScores(t *testing.T) {
	holder := profilewatch.NewHolder()
	long, err := topology.New(nil, nil, nil, holder, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []fwk.NodeInfo
	infos := map[string]*framework.NodeInfo{}
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		ni := node(name)
		nodes = append(nodes, ni)
		infos[name] = ni
	}
	shapes := []*v1.Pod{gpuPod("g1", "1"), gpuPod("g2", "2"), gpuPod("g4", "4"), gpuPod("g8", "8"), cpuPod("c")}
	rng := rand.New(rand.NewPCG(1, 2))
	placed := map[string][]*v1.Pod{}
	for cycle := range 400 {
		if cycle == 200 {
			swapped, err := holder.Apply([]byte("apiVersion: schedloop.io/v1\nkind: SchedulingProfile\nname: spread\nweights: {spread: 10, bestfit: 1}\n"))
			if err != nil || !swapped {
				t.Fatalf("profile swap: swapped=%v err=%v", swapped, err)
			}
		}
		pod := shapes[rng.IntN(len(shapes))]
		fresh, err := topology.New(nil, nil, nil, holder, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, want := scores(t, long, pod, nodes), scores(t, fresh, pod, nodes)
		if !maps.Equal(got, want) {
			t.Fatalf("cycle %d, pod %s: remembered %v, fresh %v", cycle, pod.Name, got, want)
		}
		// Change one node, as a binding or a pod ending does.
		name := string(rune('a' + rng.IntN(len(nodes))))
		ni := infos[name]
		if on := placed[name]; len(on) > 0 && rng.IntN(3) == 0 {
			victim := on[len(on)-1]
			if err := ni.RemovePod(klog.Background(), victim); err != nil {
				t.Fatal(err)
			}
			placed[name] = on[:len(on)-1]
			continue
		}
		p := pod.DeepCopy()
		p.Name, p.UID = fmt.Sprintf("%s-%d", pod.Name, cycle), types.UID(fmt.Sprintf("%s-%d", pod.Name, cycle))
		if nodeview.Node(ni, topology.DefaultLevels, nil).Fit(podspec.Request(p)) == scoring.Fits {
			ni.AddPod(p)
			placed[name] = append(placed[name], p)
		}
	}
}

// sharePod asks for milli thousandths of one GPU, recorded on device.
func sharePod(name string, milli, device int) *v1.Pod {
	p := st.MakePod().Namespace("default").Name(name).UID(name).
		Res(map[v1.ResourceName]string{v1.ResourceCPU: "1", podspec.ResourceGPUMilli: fmt.Sprint(milli)}).Obj()
	p.Annotations = map[string]string{podspec.AnnotationGPUDevices: podspec.FormatDevices([]int{device})}
	return p
}

// twoGPUNode has two GPUs, advertising shares when shares is set.
func twoGPUNode(name string, shares bool, pods ...*v1.Pod) *framework.NodeInfo {
	capacity := map[v1.ResourceName]string{v1.ResourceCPU: "128", v1.ResourceMemory: "1Ti", podspec.ResourceGPU: "2"}
	if shares {
		capacity[podspec.ResourceGPUMilli] = "2000"
	}
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(st.MakeNode().Name(name).Capacity(capacity).Obj())
	return ni
}

// Filter checks devices where shares can land: on a node offering shares a
// whole GPU is refused when every device holds a share, though the
// framework counts both GPUs free; a share is refused where no device has
// it free. On a node without shares the framework's count of whole GPUs is
// the rule, so Filter leaves whole-GPU pods to it.
func TestFilterChecksDevicesWhereSharesLand(t *testing.T) {
	halves := func() []*v1.Pod { return []*v1.Pod{sharePod("s0", 500, 0), sharePod("s1", 600, 1)} }
	tests := []struct {
		name string
		pod  *v1.Pod
		ni   fwk.NodeInfo
		want scoring.Reason
	}{
		{"whole GPU, shares on every device", gpuPod("p", "1"), twoGPUNode("n", true, halves()...), scoring.ReasonGPU},
		{"whole GPU, one device idle", gpuPod("p", "1"), twoGPUNode("n", true, sharePod("s0", 500, 0)), scoring.Fits},
		{"share too large for any device", sharePod("p", 600, 0), twoGPUNode("n", true, halves()...), scoring.ReasonGPUShare},
		{"share fits beside the smaller one", sharePod("p", 500, 0), twoGPUNode("n", true, halves()...), scoring.Fits},
		{"whole GPU on a node without shares", gpuPod("p", "2"), twoGPUNode("n", false, gpuPod("x", "1")), scoring.Fits},
		{"share on a node without shares", sharePod("p", 500, 0), twoGPUNode("n", false, gpuPod("x", "2")), scoring.ReasonGPUShare},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := topology.New(nil, nil, nil, profilewatch.NewHolder(), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			tc.pod.Annotations = nil
			state := framework.NewCycleState()
			if _, s := p.PreFilter(context.Background(), state, tc.pod, []fwk.NodeInfo{tc.ni}); !s.IsSuccess() {
				t.Fatalf("PreFilter: %v", s)
			}
			s := p.Filter(context.Background(), state, tc.pod, tc.ni)
			if tc.want == scoring.Fits && !s.IsSuccess() {
				t.Errorf("Filter = %v, want success", s)
			}
			if tc.want != scoring.Fits && (s.Code() != fwk.Unschedulable || s.Message() != string(tc.want)) {
				t.Errorf("Filter = %v, want Unschedulable %q", s, tc.want)
			}
		})
	}
}
