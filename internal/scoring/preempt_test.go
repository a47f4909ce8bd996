package scoring

import (
	"reflect"
	"testing"
	"time"
)

const sec = int64(time.Second)

// onNode puts jobs on an 8-GPU node, each holding gpus[k] whole devices
// there, and returns the node and what each holds.
func onNode(t *testing.T, gpus ...int) (*Node, [][]Allocation) {
	t.Helper()
	n := NewNode("n", "A100", 8, 64000, 512000)
	here := make([][]Allocation, len(gpus))
	for k, g := range gpus {
		r := Request{GPUs: g}
		a, err := n.Allocate(r, n.IdleDevices(g))
		if err != nil {
			t.Fatal(err)
		}
		here[k] = []Allocation{a}
	}
	return n, here
}

func TestPreemptOnNodeLosesFewestGPUHours(t *testing.T) {
	now := 1000 * sec
	tests := []struct {
		name string
		gpus []int
		jobs []VictimJob
		req  int
		want []int
		ok   bool
	}{
		{
			// Two 2-GPU jobs of 10 s cost 40 GPU-s; one 4-GPU job of
			// 100 s costs 400: the two go, though they are more victims.
			name: "two young beat one old",
			gpus: []int{4, 2, 2},
			jobs: []VictimJob{{Name: "old", Started: 900 * sec, GPUMilli: 4000}, {Name: "a", Started: 990 * sec, GPUMilli: 2000}, {Name: "b", Started: 990 * sec, GPUMilli: 2000}},
			req:  4, want: []int{1, 2}, ok: true,
		},
		{
			// The gang holds 2 GPUs here but 16 over the cluster: its
			// whole GPU time counts.
			name: "a gang costs all its members",
			gpus: []int{2, 2, 4},
			jobs: []VictimJob{{Name: "gang", Started: 990 * sec, GPUMilli: 16000}, {Name: "lone", Started: 980 * sec, GPUMilli: 2000}, {Name: "big", Started: 0, GPUMilli: 4000}},
			req:  4, want: []int{0, 1}, ok: true,
		},
		{
			name: "equal loss: fewer victims",
			gpus: []int{4, 2, 2},
			jobs: []VictimJob{{Name: "four", Started: 990 * sec, GPUMilli: 4000}, {Name: "a", Started: 990 * sec, GPUMilli: 2000}, {Name: "b", Started: 990 * sec, GPUMilli: 2000}},
			req:  4, want: []int{0}, ok: true,
		},
		{
			name: "equal loss and count: lower priority",
			gpus: []int{4, 4},
			jobs: []VictimJob{{Name: "a", Priority: 5, Started: 990 * sec, GPUMilli: 4000}, {Name: "b", Priority: 1, Started: 990 * sec, GPUMilli: 4000}},
			req:  4, want: []int{1}, ok: true,
		},
		{
			// Both lose nothing yet (started this second); the later start wins.
			name: "equal loss, count, priority: later start",
			gpus: []int{4, 4},
			jobs: []VictimJob{{Name: "a", Started: 1000 * sec}, {Name: "b", Started: 1000*sec + 5e8}},
			req:  4, want: []int{0}, ok: true,
		},
		{
			name: "all equal: name",
			gpus: []int{4, 4},
			jobs: []VictimJob{{Name: "b", Started: 990 * sec, GPUMilli: 4000}, {Name: "a", Started: 990 * sec, GPUMilli: 4000}},
			req:  4, want: []int{1}, ok: true,
		},
		{
			name: "non-preemptible never",
			gpus: []int{4, 4},
			jobs: []VictimJob{{Name: "serve", Started: 999 * sec, GPUMilli: 4000, NonPreemptible: true}, {Name: "train", Started: 0, GPUMilli: 4000}},
			req:  4, want: []int{1}, ok: true,
		},
		{
			name: "equal or higher priority never",
			gpus: []int{4, 4},
			jobs: []VictimJob{{Name: "a", Priority: 10, GPUMilli: 4000}, {Name: "b", Priority: 11, GPUMilli: 4000}},
			req:  4,
		},
		{
			name: "no set makes room",
			gpus: []int{4, 4},
			jobs: []VictimJob{{Name: "a", GPUMilli: 4000}, {Name: "serve", GPUMilli: 4000, NonPreemptible: true}},
			req:  8,
		},
		{
			name: "fits already: nothing to evict",
			gpus: []int{4},
			jobs: []VictimJob{{Name: "a", GPUMilli: 4000}},
			req:  4,
		},
	}
	p := Params{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, here := onNode(t, tc.gpus...)
			before := n.Clone()
			c, ok := p.PreemptOnNode(n, Request{GPUs: tc.req}, 10, now, tc.jobs, here)
			if ok != tc.ok || !reflect.DeepEqual(c.Victims, tc.want) {
				t.Errorf("victims %v, %v; want %v, %v", c.Victims, ok, tc.want, tc.ok)
			}
			if !reflect.DeepEqual(n, before) {
				t.Error("PreemptOnNode changed the node")
			}
		})
	}
}

func TestPreemptOnNodeSparesYoungJobs(t *testing.T) {
	p := Params{PreemptMinRunTime: time.Minute}
	n, here := onNode(t, 4, 4)
	jobs := []VictimJob{{Name: "young", Started: 100 * sec, GPUMilli: 4000}, {Name: "old", Started: 0, GPUMilli: 4000}}
	// The young job would lose far less, but it has run 59 s of 60.
	c, ok := p.PreemptOnNode(n, Request{GPUs: 4}, 10, 159*sec, jobs, here)
	if !ok || !reflect.DeepEqual(c.Victims, []int{1}) {
		t.Errorf("victims %v, %v; want the old job [1]", c.Victims, ok)
	}
	if _, ok := p.PreemptOnNode(n, Request{GPUs: 8}, 10, 159*sec, jobs, here); ok {
		t.Error("8 GPUs freed by evicting a job younger than the minimum run time")
	}
	c, ok = p.PreemptOnNode(n, Request{GPUs: 4}, 10, 160*sec, jobs, here)
	if !ok || !reflect.DeepEqual(c.Victims, []int{0}) {
		t.Errorf("at its minimum run time the young job is the cheaper victim: %v, %v", c.Victims, ok)
	}
}

// Above ExactVictimSearch jobs the search reprieves the costliest first
// and evicts no job it does not need.
func TestPreemptOnNodeGreedyIsMinimal(t *testing.T) {
	n := NewNode("n", "A100", 8, 64000, 512000)
	var jobs []VictimJob
	var here [][]Allocation
	for k := range 16 {
		r := Request{GPUs: 1, GPUMilli: 500}
		a, err := n.Allocate(r, []int{k / 2})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, VictimJob{Name: string(rune('a' + k)), Started: int64(k) * sec, GPUMilli: 500})
		here = append(here, []Allocation{a})
	}
	// A whole device: both halves of one device must go; the cheapest
	// pair is the latest started, on device 7 (jobs 14 and 15).
	c, ok := (Params{}).PreemptOnNode(n, Request{GPUs: 1}, 1, 100*sec, jobs, here)
	if !ok || !reflect.DeepEqual(c.Victims, []int{14, 15}) {
		t.Errorf("victims %v, %v; want [14 15]", c.Victims, ok)
	}
}

func TestBetterPreemptionOrder(t *testing.T) {
	base := PreemptionChoice{Node: "b", Victims: []int{0}, Lost: 10, Highest: 1, EarliestStart: 5, Names: []string{"x"}}
	better := []struct {
		name string
		edit func(*PreemptionChoice)
	}{
		{"less lost", func(c *PreemptionChoice) { c.Lost = 9; c.Victims = []int{0, 1} }},
		{"fewer victims", func(c *PreemptionChoice) { c.Victims = nil; c.Highest = 9 }},
		{"lower priority", func(c *PreemptionChoice) { c.Highest = 0; c.EarliestStart = 0 }},
		{"later start", func(c *PreemptionChoice) { c.EarliestStart = 6; c.Names = []string{"z"} }},
		{"names", func(c *PreemptionChoice) { c.Names = []string{"w"}; c.Node = "z" }},
		{"node", func(c *PreemptionChoice) { c.Node = "a" }},
	}
	for _, tc := range better {
		c := base
		c.Victims = []int{0}
		tc.edit(&c)
		if !BetterPreemption(c, base) || BetterPreemption(base, c) {
			t.Errorf("%s: %+v should beat %+v", tc.name, c, base)
		}
	}
}

func TestPreemptible(t *testing.T) {
	p := Params{PreemptMinRunTime: time.Minute}
	m := int64(time.Minute)
	switch {
	case p.Preemptible(0, m-1, false):
		t.Error("a job younger than the minimum run time was offered")
	case !p.Preemptible(0, m, false):
		t.Error("a job that ran the minimum run time was spared")
	case p.Preemptible(0, 100*m, true):
		t.Error("a non-preemptible job was offered")
	case !(Params{}).Preemptible(5, 5, false):
		t.Error("without a minimum run time any job may be a victim")
	case !p.Preemptible(sec/2, m+sec/4, false):
		// Counted in whole seconds: started in second 0, now in second 60.
		t.Error("whole seconds: 0 to 60 is the minimum run time")
	}
}
