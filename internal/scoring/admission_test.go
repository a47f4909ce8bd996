package scoring

import "testing"

func TestGangFitSetsAsideReservingGangs(t *testing.T) {
	twoHosts := func() []*Node {
		return []*Node{NewNode("a", "H100", 8, 64000, 1<<20), NewNode("b", "H100", 8, 64000, 1<<20)}
	}
	eight := Request{GPUs: 8}
	tests := []struct {
		name      string
		reserving []GangDemand
		req       Request
		members   int
		want      int
	}{
		{"empty cluster holds a two-host gang", nil, eight, 2, 2},
		{"a reserving gang takes one host", []GangDemand{{eight, 1}}, eight, 2, 1},
		{"a reserving gang takes both", []GangDemand{{eight, 2}}, eight, 2, 0},
		{"small pods fill what is left", []GangDemand{{Request{GPUs: 4}, 3}}, Request{GPUs: 1}, 8, 4},
		{"stops counting at members", nil, Request{GPUs: 1}, 3, 3},
	}
	for _, tc := range tests {
		nodes := twoHosts()
		if got := GangFit(nodes, tc.reserving, tc.req, tc.members); got != tc.want {
			t.Errorf("%s: GangFit = %d, want %d", tc.name, got, tc.want)
		}
		if nodes[0].IdleGPUs() != 8 || nodes[1].IdleGPUs() != 8 {
			t.Errorf("%s: GangFit changed its input", tc.name)
		}
	}
}

// TestGangShortOfGPUs: a gang GangFit refuses is short of GPUs when its
// members do not fit even with CPU and memory set aside, else of CPU or
// memory; GPUs held by a reserving gang count as short GPUs.
func TestGangShortOfGPUs(t *testing.T) {
	node := func() []*Node { return []*Node{NewNode("a", "H100", 8, 16000, 1<<16)} }
	tests := []struct {
		name      string
		reserving []GangDemand
		req       Request
		members   int
		want      bool
	}{
		{"one member, GPUs short", nil, Request{GPUs: 16, CPUMilli: 1000}, 1, true},
		{"one member, CPU short", nil, Request{GPUs: 1, CPUMilli: 32000}, 1, false},
		{"memory short", nil, Request{GPUs: 1, MemoryMiB: 1 << 15}, 4, false},
		{"both short: GPUs named", nil, Request{GPUs: 4, CPUMilli: 32000}, 3, true},
		{"GPUs held by a reserving gang", []GangDemand{{Request{GPUs: 8}, 1}}, Request{GPUs: 1}, 1, true},
		{"no GPUs asked", nil, Request{CPUMilli: 32000}, 1, false},
	}
	for _, tc := range tests {
		nodes := node()
		if fit := GangFit(nodes, tc.reserving, tc.req, tc.members); fit >= tc.members {
			t.Fatalf("%s: GangFit = %d, the case must be a refused gang", tc.name, fit)
		}
		if got := GangShortOfGPUs(nodes, tc.reserving, tc.req, tc.members); got != tc.want {
			t.Errorf("%s: GangShortOfGPUs = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestReserveReportsShortfall(t *testing.T) {
	nodes := []*Node{NewNode("a", "H100", 8, 64000, 1<<20)}
	if short := Reserve(nodes, []GangDemand{{Request{GPUs: 3}, 3}}); short != 1 || nodes[0].IdleGPUs() != 2 {
		t.Errorf("short = %d, idle = %d; want 1, 2", short, nodes[0].IdleGPUs())
	}
}

func TestLargestDomainGPUs(t *testing.T) {
	nodes := cluster()
	nodes[0].GPUFree = make([]int, 8) // r1a1 full
	if got := LargestDomainGPUs(nodes, 1, 2); got != 16 {
		t.Errorf("NVLink level = %d, want 16", got)
	}
	if got := LargestDomainGPUs(nodes, 0, 2); got != 32 {
		t.Errorf("rack level = %d, want 32", got)
	}
	if got := LargestDomainGPUs(nodes, 2, 2); got != 8 {
		t.Errorf("host level = %d, want 8", got)
	}
}

func TestBestBreaksTiesByName(t *testing.T) {
	tests := []struct {
		names  []string
		scores []float64
		want   int
	}{
		{nil, nil, -1},
		{[]string{"b", "a", "c"}, []float64{5, 5, 4}, 1},
		{[]string{"b", "a", "c"}, []float64{5, 5, 6}, 2},
		{[]string{"z"}, []float64{0}, 0},
	}
	for _, tc := range tests {
		if got := Best(tc.names, tc.scores); got != tc.want {
			t.Errorf("Best(%v, %v) = %d, want %d", tc.names, tc.scores, got, tc.want)
		}
	}
}
