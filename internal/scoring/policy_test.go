package scoring

import (
	"reflect"
	"testing"
)

func TestSelectNodeBreaksTiesByName(t *testing.T) {
	nodes := []*Node{
		NewNode("c", "A100", 8, 64000, 1<<20),
		NewNode("a", "A100", 8, 64000, 1<<20),
		NewNode("b", "A100", 8, 64000, 1<<20),
		NewNode("tiny", "A100", 1, 64000, 1<<20),
	}
	s := &Scorer{Weights: Weights{TermBinPack: 1}}
	score := func(_ int, n *Node) (float64, []int) { return s.Score(n, Request{GPUs: 2}) }
	if i, _ := SelectNode(nodes, Request{GPUs: 2}, score); nodes[i].Name != "a" {
		t.Errorf("equal scores chose %s, want a (first by name)", nodes[i].Name)
	}
	nodes[2].GPUFree[0] = 0 // b is now fuller: binpack prefers it
	if i, d := SelectNode(nodes, Request{GPUs: 2}, score); nodes[i].Name != "b" || !reflect.DeepEqual(d, []int{1, 2}) {
		t.Errorf("chose %s %v, want b [1 2]", nodes[i].Name, d)
	}
	if i, _ := SelectNode(nodes, Request{GPUs: 9}, score); i != -1 {
		t.Errorf("an unfit request chose %d", i)
	}
	for _, tc := range []struct {
		as     float64
		an     string
		bs     float64
		bn     string
		better bool
	}{{2, "z", 1, "a", true}, {1, "a", 1, "b", true}, {1, "b", 1, "a", false}, {0, "a", 1, "z", false}, {50.4, "z", 50.3, "a", true}} {
		if got := Better(tc.as, tc.an, tc.bs, tc.bn); got != tc.better {
			t.Errorf("Better(%v %s, %v %s) = %v", tc.as, tc.an, tc.bs, tc.bn, got)
		}
	}
}

func TestRandomRankIsSeededAndSpreads(t *testing.T) {
	if RandomRank(1, 2, "n") != RandomRank(1, 2, "n") {
		t.Fatal("same inputs, different rank")
	}
	if RandomRank(1, 2, "n") == RandomRank(2, 2, "n") {
		t.Fatal("the seed does not change the rank")
	}
	wins := map[string]int{}
	names := []string{"a", "b", "c", "d"}
	for pod := uint64(0); pod < 4000; pod++ {
		best, bestRank := "", uint64(0)
		for _, n := range names {
			if r := RandomRank(42, pod, n); best == "" || r > bestRank {
				best, bestRank = n, r
			}
		}
		wins[best]++
	}
	for _, n := range names {
		if wins[n] < 850 || wins[n] > 1150 {
			t.Errorf("node %s won %d of 4000 draws, want about 1000", n, wins[n])
		}
	}
	n := node8(1000, 200, 600, 1000)
	for pod := uint64(0); pod < 50; pod++ {
		d := RandomDevices(n, Request{GPUs: 1, GPUMilli: 500}, 7, pod)
		if len(d) != 1 || n.GPUFree[d[0]] < 500 {
			t.Fatalf("RandomDevices chose %v on %v", d, n.GPUFree)
		}
	}
}

func TestPolicies(t *testing.T) {
	for _, p := range Policies {
		got, err := ParsePolicy(string(p))
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%s) = %v, %v", p, got, err)
		}
		if w := p.Weights(); p != PolicyRandom && w.Validate() != nil {
			t.Errorf("%s weights invalid: %v", p, w.Validate())
		}
	}
	if _, err := ParsePolicy("clairvoyant"); err == nil {
		t.Error("unknown policy accepted")
	}
}

func TestQueueAdmits(t *testing.T) {
	tests := []struct {
		name   string
		limit  QueueLimit
		used   QueueUsage
		demand int64
		gang   bool
		want   bool
	}{
		{"unlimited", QueueLimit{}, QueueUsage{GPUMilli: 1e9, RunningGangs: 99}, 8000, true, true},
		{"fits exactly", QueueLimit{MaxGPUs: 8}, QueueUsage{GPUMilli: 4000}, 4000, false, true},
		{"over by a share", QueueLimit{MaxGPUs: 8}, QueueUsage{GPUMilli: 4000}, 4001, false, false},
		{"gang limit", QueueLimit{MaxRunningGangs: 2}, QueueUsage{RunningGangs: 2}, 1000, true, false},
		{"gang limit ignores lone pods", QueueLimit{MaxRunningGangs: 2}, QueueUsage{RunningGangs: 2}, 1000, false, true},
	}
	for _, tc := range tests {
		if got := QueueAdmits(tc.limit, tc.used, tc.demand, tc.gang); got != tc.want {
			t.Errorf("%s: QueueAdmits = %v, want %v", tc.name, got, tc.want)
		}
	}
	keys := []QueueKey{{Priority: 0, Created: 5, Name: "b", Gang: ""}, {Priority: 10, Created: 9, Name: "z", Gang: ""}, {Priority: 0, Created: 5, Name: "g2", Gang: "g2"}, {Priority: 0, Created: 5, Name: "a", Gang: ""}, {Priority: 0, Created: 1, Name: "c", Gang: ""},
		{Priority: 0, Created: 5, Name: "g1", Gang: "g1"}}
	// At one arrival, lone pods first, then gangs by key.
	want := []QueueKey{{Priority: 10, Created: 9, Name: "z", Gang: ""}, {Priority: 0, Created: 1, Name: "c", Gang: ""}, {Priority: 0, Created: 5, Name: "a", Gang: ""}, {Priority: 0, Created: 5, Name: "b", Gang: ""}, {Priority: 0, Created: 5, Name: "g1", Gang: "g1"},
		{Priority: 0, Created: 5, Name: "g2", Gang: "g2"}}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if CompareQueueKeys(keys[j], keys[i]) < 0 {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("queue order %v, want %v", keys, want)
	}
}

func TestPlaceGangIsAllOrNothing(t *testing.T) {
	nodes := cluster()
	s := Scorer{Weights: Weights{TermTopology: 10, TermBinPack: 1}}
	allocs, idx, ok := PlaceGang(nodes, Request{GPUs: 8}, 2, 2, -1, s)
	if !ok || len(allocs) != 2 {
		t.Fatalf("PlaceGang of 2 = %v, %v", allocs, ok)
	}
	for _, i := range idx {
		if nodes[i].Domains[1] != "r1a" {
			t.Errorf("member on %s, want the r1a NVLink domain", nodes[i].Name)
		}
	}
	before := make([]*Node, len(nodes))
	for i, n := range nodes {
		before[i] = n.Clone()
	}
	if _, _, ok := PlaceGang(nodes, Request{GPUs: 8}, 7, 2, -1, s); ok {
		t.Fatal("7 members of 8 GPUs placed on 6 free nodes")
	}
	// Capacity says 6 fit, but a required rack holds only 4.
	if _, _, ok := PlaceGang(nodes, Request{GPUs: 8}, 5, 2, 0, s); ok {
		t.Fatal("5 members placed inside one rack of 4 nodes")
	}
	if !reflect.DeepEqual(nodes, before) {
		t.Error("a failed gang left allocations behind")
	}
	ReleaseAll(nodes, allocs, idx)
	if nodes[idx[0]].IdleGPUs() != 8 {
		t.Error("ReleaseAll did not free the gang")
	}
}

// A CPU-only pod must not take the last CPU of a node whose GPUs the typical
// (GPU) pods still need: FGD sends it where its CPU strands nothing.
func TestFragmentationSteersCPUOnlyPods(t *testing.T) {
	gpuNode := NewNode("a-gpu", "A100", 8, 8000, 1<<20)
	cpuNode := NewNode("b-cpu", "A100", 0, 8000, 1<<20)
	w := Workload{{Request{CPUMilli: 4000, GPUs: 1}, 1}}
	s := &Scorer{Weights: Weights{TermFragmentation: 1}, Workload: w}
	r := Request{CPUMilli: 6000}
	i, _ := SelectNode([]*Node{gpuNode, cpuNode}, r, func(_ int, n *Node) (float64, []int) { return s.Score(n, r) })
	if i != 1 {
		t.Errorf("CPU-only pod went to %d, want the CPU node (1)", i)
	}
}
