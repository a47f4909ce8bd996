package scoring

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func node8(free ...int) *Node {
	n := NewNode("n", "A100", len(free), 64000, 512000)
	copy(n.GPUFree, free)
	return n
}

func TestFitNamesTheShortResource(t *testing.T) {
	n := node8(1000, 1000, 400, 0)
	n.CPUMilliFree = 1000
	tests := []struct {
		name string
		req  Request
		want Reason
	}{
		{"two whole", Request{GPUs: 2}, Fits},
		{"three whole", Request{GPUs: 3}, ReasonGPU},
		{"share fits the partly used device", Request{GPUs: 1, GPUMilli: 400}, Fits},
		{"share larger than any device", Request{GPUs: 1, GPUMilli: 1000}, Fits},
		{"cpu", Request{CPUMilli: 2000}, ReasonCPU},
		{"memory", Request{MemoryMiB: 1 << 30}, ReasonMemory},
		{"model", Request{GPUs: 1, GPUModels: []string{"T4"}}, ReasonGPUModel},
		{"model ignored without GPUs", Request{GPUModels: []string{"T4"}}, Fits},
	}
	for _, tc := range tests {
		if got := n.Fit(tc.req); got != tc.want {
			t.Errorf("%s: Fit(%+v) = %q, want %q", tc.name, tc.req, got, tc.want)
		}
	}
	full := node8(300, 200)
	if got := full.Fit(Request{GPUs: 1, GPUMilli: 500}); got != ReasonGPUShare {
		t.Errorf("share on full devices: %q, want %q", got, ReasonGPUShare)
	}
}

func TestAllocateAndRelease(t *testing.T) {
	n := node8(1000, 1000, 1000, 600)
	before := n.Clone()
	a, err := n.Allocate(Request{CPUMilli: 1000, MemoryMiB: 10, GPUs: 1, GPUMilli: 500}, []int{3})
	if err != nil {
		t.Fatal(err)
	}
	if n.GPUFree[3] != 100 || n.CPUMilliFree != 63000 || n.MemoryMiBFree != 511990 {
		t.Fatalf("after allocate: %+v", n)
	}
	n.Release(a)
	if !reflect.DeepEqual(n, before) {
		t.Fatalf("release did not restore the node: %+v vs %+v", n, before)
	}
	bad := []struct {
		req     Request
		devices []int
		want    string
	}{
		{Request{GPUs: 2}, []int{0}, "1 devices chosen for a request of 2"},
		{Request{GPUs: 2}, []int{0, 0}, "device 0 cannot give"},
		{Request{GPUs: 1}, []int{3}, "device 3 cannot give 1000"},
		{Request{GPUs: 1}, []int{9}, "device 9 cannot give"},
		{Request{GPUs: 4}, []int{0, 1, 2, 3}, "Insufficient nvidia.com/gpu"},
	}
	for _, tc := range bad {
		if _, err := n.Allocate(tc.req, tc.devices); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Allocate(%+v, %v) err = %v, want %q", tc.req, tc.devices, err, tc.want)
		}
	}
	if !reflect.DeepEqual(n, before) {
		t.Fatal("a refused allocation changed the node")
	}
}

func TestTypicalWorkloadCoverage(t *testing.T) {
	var reqs []Request
	for i := 0; i < 60; i++ {
		reqs = append(reqs, Request{GPUs: 1})
	}
	for i := 0; i < 30; i++ {
		reqs = append(reqs, Request{GPUs: 1, GPUMilli: 500})
	}
	for i := 0; i < 6; i++ {
		reqs = append(reqs, Request{GPUs: 8})
	}
	for i := 0; i < 4; i++ {
		reqs = append(reqs, Request{GPUs: 2})
	}
	w := TypicalWorkload(reqs, 0.95)
	want := Workload{{Request{GPUs: 1}, 60.0 / 96}, {Request{GPUs: 1, GPUMilli: 500}, 30.0 / 96}, {Request{GPUs: 8}, 6.0 / 96}}
	if !reflect.DeepEqual(w, want) {
		t.Errorf("TypicalWorkload = %+v\nwant %+v", w, want)
	}
	// Order of input must not matter.
	rev := make([]Request, len(reqs))
	for i := range reqs {
		rev[len(reqs)-1-i] = reqs[i]
	}
	if w2 := TypicalWorkload(rev, 0.95); !reflect.DeepEqual(w, w2) {
		t.Errorf("reversed input changed the workload: %+v", w2)
	}
}

// The worked example: devices free [1000 x6, 300, 500]; half the pods take
// one whole GPU, half take half a GPU.
func TestFragmentationWorkedExample(t *testing.T) {
	n := node8(1000, 1000, 1000, 1000, 1000, 1000, 300, 500)
	w := Workload{{Request{GPUs: 1}, 0.5}, {Request{GPUs: 1, GPUMilli: 500}, 0.5}}
	// Whole-GPU pods cannot use 300+500; half-GPU pods cannot use 300.
	if f := Fragmentation(n, w); f != 550 {
		t.Fatalf("Fragmentation = %v, want 550", f)
	}
	// A 300 milli pod on device 6 removes 300 of fragmentation (F: 550 -> 250);
	// device 7 would leave 500 and an idle device 900.
	devices, score := FragmentationChoice(n, Request{GPUs: 1, GPUMilli: 300}, w)
	if !reflect.DeepEqual(devices, []int{6}) {
		t.Errorf("devices = %v, want [6]", devices)
	}
	// sigmoid(0.3)·100 = 57.44, cut to the whole score the artifact uses.
	if want := math.Floor(100 / (1 + math.Exp(-0.3))); score != want {
		t.Errorf("score = %v, want %v", score, want)
	}
	if f := Fragmentation(n, w); f != 550 {
		t.Fatalf("trial placements leaked into the node: F = %v", f)
	}
	// A node that cannot host a class counts all its free capacity.
	starved := node8(1000, 1000)
	starved.CPUMilliFree = 0
	if f := Fragmentation(starved, Workload{{Request{CPUMilli: 1, GPUs: 1}, 1}}); f != 2000 {
		t.Errorf("node without CPU: F = %v, want 2000", f)
	}
	// A shape without GPUs can use no free device, room or not.
	cpuOnly := Workload{{Request{CPUMilli: 1}, 1}}
	if f := Fragmentation(n, cpuOnly); f != 6800 {
		t.Errorf("CPU-only class on a node with room: F = %v, want 6800", f)
	}
	if f := Fragmentation(starved, cpuOnly); f != 2000 {
		t.Errorf("CPU-only class on a node without CPU: F = %v, want 2000", f)
	}
}

// Classes drop memory and break frequency ties toward the larger shape.
func TestTypicalWorkloadShapesAndTies(t *testing.T) {
	reqs := []Request{
		{CPUMilli: 4000, MemoryMiB: 100, GPUs: 1, GPUMilli: 500},
		{CPUMilli: 4000, MemoryMiB: 999, GPUs: 1, GPUMilli: 500},
		{CPUMilli: 8000, MemoryMiB: 7},
		{CPUMilli: 8000, MemoryMiB: 7},
		{CPUMilli: 4000, GPUs: 1},
		{CPUMilli: 4000, GPUs: 1},
	}
	got := TypicalWorkload(reqs, 1)
	want := Workload{
		{Request{CPUMilli: 8000}, 2.0 / 6},
		{Request{CPUMilli: 4000, GPUs: 1}, 2.0 / 6},
		{Request{CPUMilli: 4000, GPUs: 1, GPUMilli: 500}, 2.0 / 6},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("TypicalWorkload = %+v\nwant %+v", got, want)
	}
}

// The GPU Packing bands of the paper's artifact.
func TestPackingBands(t *testing.T) {
	tests := []struct {
		name string
		n    *Node
		r    Request
		want float64
	}{
		{"idle 2-GPU node", node8(1000, 1000), Request{GPUs: 1}, 31},
		{"idle 8-GPU node", node8(1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000), Request{GPUs: 1}, 25},
		{"share on a device with 400 free", node8(400, 1000), Request{GPUs: 1, GPUMilli: 300}, 96},
		{"share on a device with 990 free", node8(990, 1000), Request{GPUs: 1, GPUMilli: 300}, 91},
		{"share needing an idle device on a used node", node8(200, 1000), Request{GPUs: 1, GPUMilli: 300}, 49},
		{"two whole devices on a used node", node8(0, 1000, 1000, 1000), Request{GPUs: 2}, 48},
		{"no GPUs", node8(0, 1000), Request{CPUMilli: 1000}, 0},
	}
	for _, tc := range tests {
		s := Scorer{Weights: Weights{TermPacking: 1}}
		if got, _ := s.Score(tc.n, tc.r); got != tc.want {
			t.Errorf("%s: packing = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestWeightsValidate(t *testing.T) {
	tests := []struct {
		w    Weights
		want string
	}{
		{DefaultWeights(), ""},
		{Weights{TermSpread: 1}, ""},
		{Weights{"gravity": 1}, "weights.gravity: unknown score term"},
		{Weights{TermBinPack: -1}, "weights.binpack: -1 is outside 0..100"},
		{Weights{TermBinPack: 101}, "weights.binpack: 101 is outside"},
		{Weights{TermBinPack: math.NaN()}, "weights.binpack: NaN is outside"},
		{Weights{TermBinPack: 0}, "every term is zero"},
		{Weights{}, "every term is zero"},
	}
	for _, tc := range tests {
		err := tc.w.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%v) = %v, want %q", tc.w, err, tc.want)
		}
	}
}

func TestBinPackAndSpreadOrderNodesOppositely(t *testing.T) {
	busy := node8(0, 0, 0, 1000, 1000, 1000, 1000, 1000)
	idle := node8(1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000)
	r := Request{GPUs: 2}
	pack := &Scorer{Weights: Weights{TermBinPack: 1}}
	spread := &Scorer{Weights: Weights{TermSpread: 1}}
	if !(pack.NodeScore(busy, r) > pack.NodeScore(idle, r)) {
		t.Errorf("binpack: busy %d <= idle %d", pack.NodeScore(busy, r), pack.NodeScore(idle, r))
	}
	if !(spread.NodeScore(busy, r) < spread.NodeScore(idle, r)) {
		t.Errorf("spread: busy %d >= idle %d", spread.NodeScore(busy, r), spread.NodeScore(idle, r))
	}
	// 5 of 8 GPUs used after placing 2 on the busy node.
	if got := pack.NodeScore(busy, r); got != 63 {
		t.Errorf("binpack busy = %d, want 63 (5/8)", got)
	}
}

func TestScoreStaysInRange(t *testing.T) {
	all := Weights{}
	for _, term := range Terms {
		all[term] = 1
	}
	w := Workload{{Request{GPUs: 1}, 0.7}, {Request{GPUs: 1, GPUMilli: 250}, 0.3}}
	nodes := []*Node{node8(1000, 1000), node8(0, 250), node8(1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000)}
	reqs := []Request{{GPUs: 1}, {GPUs: 1, GPUMilli: 250}, {CPUMilli: 100}, {GPUs: 2}}
	plan := &GangPlan{Level: 0, Path: []string{"r1"}}
	for _, n := range nodes {
		for _, r := range reqs {
			if n.Fit(r) != Fits {
				continue
			}
			s := &Scorer{Weights: all, Workload: w, Plan: plan}
			v, devices := s.Score(n, r)
			if v < 0 || v > 100 || math.IsNaN(v) {
				t.Errorf("Score(%v, %+v) = %v", n.GPUFree, r, v)
			}
			if _, err := n.Clone().Allocate(r, devices); err != nil {
				t.Errorf("Score chose devices %v that cannot serve %+v on %v: %v", devices, r, n.GPUFree, err)
			}
		}
	}
}

// Two racks, each with two NVLink domains of two 8-GPU nodes.
func cluster() []*Node {
	var nodes []*Node
	for _, rack := range []string{"r1", "r2"} {
		for _, nv := range []string{"a", "b"} {
			for _, h := range []string{"1", "2"} {
				nodes = append(nodes, NewNode(rack+nv+h, "A100", 8, 96000, 1<<20, rack, rack+nv))
			}
		}
	}
	return nodes
}

func TestPlanGangPicksInnermostTightestDomain(t *testing.T) {
	nodes := cluster()
	whole := Request{GPUs: 8}
	// Use 4 GPUs on r2a1 so r2's capacity for 8-GPU members drops.
	nodes[4].GPUFree = []int{0, 0, 0, 0, 1000, 1000, 1000, 1000}
	tests := []struct {
		name     string
		req      Request
		members  int
		maxLevel int
		want     GangPlan
		ok       bool
	}{
		{"one member fits a host", whole, 1, -1, GangPlan{Level: 2, Path: []string{"r1", "r1a", "r1a1"}, Spare: 0}, true},
		{"two members: an NVLink domain", whole, 2, -1, GangPlan{Level: 1, Path: []string{"r1", "r1a"}, Spare: 0}, true},
		// r2 holds 3 eight-GPU members, r1 holds 4: r2 is the tighter fit.
		{"three members: the tighter rack", whole, 3, -1, GangPlan{Level: 0, Path: []string{"r2"}, Spare: 0}, true},
		{"four members: only r1", whole, 4, -1, GangPlan{Level: 0, Path: []string{"r1"}, Spare: 0}, true},
		{"five members span racks", whole, 5, -1, GangPlan{Level: -1, Spare: 2}, true},
		{"five members with a required rack", whole, 5, 0, GangPlan{}, false},
		{"nine members do not fit", whole, 9, -1, GangPlan{}, false},
		{"half GPUs pack 16 into a host", Request{GPUs: 1, GPUMilli: 500}, 16, -1, GangPlan{Level: 2, Path: []string{"r1", "r1a", "r1a1"}, Spare: 0}, true},
	}
	for _, tc := range tests {
		got, ok := PlanGang(nodes, tc.req, tc.members, 2, tc.maxLevel)
		if ok != tc.ok || ok && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: PlanGang = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestTopologyScoreFallsOffWithDistance(t *testing.T) {
	nodes := cluster()
	plan := &GangPlan{Level: 1, Path: []string{"r1", "r1a"}}
	want := map[string]float64{"r1a1": 100, "r1a2": 100, "r1b1": 50, "r2a1": 0}
	for _, n := range nodes {
		if w, ok := want[n.Name]; ok {
			if got := plan.Score(n); got != w {
				t.Errorf("Score(%s) = %v, want %v", n.Name, got, w)
			}
			if plan.Contains(n) != (w == 100) {
				t.Errorf("Contains(%s) = %v", n.Name, plan.Contains(n))
			}
		}
	}
	var none *GangPlan
	if none.Score(nodes[0]) != 0 || !none.Contains(nodes[0]) {
		t.Error("a nil plan must be neutral")
	}
	host := &GangPlan{Level: 2, Path: []string{"r1", "r1a", "r1a2"}}
	if got := host.Score(nodes[1]); got != 100 {
		t.Errorf("host plan on its host = %v", got)
	}
	if got := host.Score(nodes[0]); math.Abs(got-200.0/3) > 1e-9 {
		t.Errorf("host plan on its NVLink neighbour = %v, want 66.7", got)
	}
}

func TestTopologyTermKeepsGangTogether(t *testing.T) {
	nodes := cluster()
	plan, ok := PlanGang(nodes, Request{GPUs: 8}, 2, 2, -1)
	if !ok {
		t.Fatal("no plan")
	}
	s := &Scorer{Weights: Weights{TermTopology: 10, TermSpread: 1}, Plan: &plan}
	best := ""
	bestScore := -1.0
	for _, n := range nodes {
		if v, _ := s.Score(n, Request{GPUs: 8}); v > bestScore {
			best, bestScore = n.Name, v
		}
	}
	if !plan.Contains(nodes[0]) || best != "r1a1" {
		t.Errorf("best node %s (plan %+v), want the first node of the planned domain", best, plan)
	}
}
