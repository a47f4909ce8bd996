package scoring

import (
	"fmt"
	"testing"
)

// The figures kube-scheduler's numFeasibleNodesToFind gives.
func TestNodesToFind(t *testing.T) {
	tests := []struct{ nodes, percentage, want int }{
		{50, 0, 50},       // small clusters are searched whole
		{99, 10, 99},      // ... whatever the percentage
		{100, 0, 100},     // 50-0 = 50% of 100 is 50, raised to the floor of 100
		{1000, 0, 420},    // 50-8 = 42%
		{5000, 0, 500},    // 50-40 = 10%
		{10000, 0, 500},   // 50-80 < 5: 5%
		{1000, 100, 1000}, // everything
		{1000, 30, 300},
		{1000, 5, 100}, // floor of 100 nodes
		{1000, 250, 1000},
	}
	for _, tc := range tests {
		if got := NodesToFind(tc.nodes, tc.percentage); got != tc.want {
			t.Errorf("NodesToFind(%d, %d) = %d, want %d", tc.nodes, tc.percentage, got, tc.want)
		}
	}
}

func TestSelectNodeSampled(t *testing.T) {
	var nodes []*Node
	for i := range 10 {
		nodes = append(nodes, NewNode(fmt.Sprintf("n%d", i), "", 8, 64000, 1<<20))
	}
	// n3 and n4 are full; the score prefers higher indexes.
	for _, i := range []int{3, 4} {
		nodes[i].GPUFree = make([]int, 8)
	}
	byIndex := func(i int, _ *Node) (float64, []int) { return float64(i), nil }
	r := Request{GPUs: 1}
	tests := []struct {
		start, want            int
		wantBest, wantExamined int
	}{
		{0, 3, 2, 3},    // n0 n1 n2
		{2, 3, 6, 5},    // n2, n3 and n4 full, n5 n6
		{8, 3, 9, 3},    // n8 n9 n0: wraps, best is n9
		{0, 100, 9, 10}, // asks for more than exist: every node once
	}
	for _, tc := range tests {
		best, _, examined := SelectNodeSampled(nodes, r, tc.start, tc.want, byIndex)
		if best != tc.wantBest || examined != tc.wantExamined {
			t.Errorf("start %d want %d: best n%d after %d nodes, want n%d after %d", tc.start, tc.want, best, examined, tc.wantBest, tc.wantExamined)
		}
	}
	// Sampling every node is SelectNode.
	if best, _, _ := SelectNodeSampled(nodes, r, 7, len(nodes), byIndex); best != 9 {
		t.Errorf("whole sample chose n%d, want n9", best)
	}
	if best, _ := SelectNode(nodes, r, byIndex); best != 9 {
		t.Errorf("SelectNode chose n%d, want n9", best)
	}
}
