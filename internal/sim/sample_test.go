package sim

import (
	"fmt"
	"slices"
	"testing"

	"github.com/schedloop/schedloop/internal/scoring"
)

// On a cluster past 100 nodes the replay scores a lone pod on the sample of
// feasible nodes kube-scheduler would find, walking on from where the last
// decision stopped; at 100% it scores every node.
func TestLonePodsAreScoredOnTheSchedulersSample(t *testing.T) {
	c := &Cluster{Depth: 1}
	for i := range 300 {
		c.Nodes = append(c.Nodes, scoring.NewNode(fmt.Sprintf("n%03d", i), "A100", 8, 64000, 1<<20, "rack-0"))
	}
	jobs := []Job{job("a", 0, 1000, 1, 1), job("b", 1, 1000, 1, 1), job("c", 2, 1000, 1, 1)}
	pack := scoring.Weights{scoring.TermBinPack: 1}
	placed := func(percentage int) []string {
		r, err := Run(c.Clone(), jobs, Config{Params: scoring.Params{Weights: pack}, RecordPlacements: true, PercentageOfNodesToScore: percentage})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range r.Jobs {
			out = append(out, o.Nodes...)
		}
		return out
	}
	// 300 nodes: 50-2 = 48% -> 144 nodes per decision. The first pod sees
	// n000..n143, the second n144..n287 (n000 is not among them, so it cannot
	// pack onto it), the third n288..n299 and n000..n131 and packs onto n000.
	if got, want := placed(0), []string{"n000", "n144", "n000"}; !slices.Equal(got, want) {
		t.Errorf("adaptive sample: placed on %v, want %v", got, want)
	}
	if got, want := placed(100), []string{"n000", "n000", "n000"}; !slices.Equal(got, want) {
		t.Errorf("every node: placed on %v, want %v", got, want)
	}
}

// A gang planned into a domain stays inside it whenever the topology term
// counts, even when another term alone would pull members out.
func TestGangStaysInItsPlannedDomain(t *testing.T) {
	c := &Cluster{Depth: 1}
	for i := range 4 {
		c.Nodes = append(c.Nodes, scoring.NewNode(fmt.Sprintf("n%d", i), "A100", 8, 64000, 1<<20, fmt.Sprintf("rack-%d", i/2)))
	}
	// rack-0 is half used, rack-1 is empty: the plan takes the tighter domain that holds the gang.
	jobs := []Job{job("busy", 0, 1000, 1, 4), job("gang", 1, 100, 3, 4)}
	for _, w := range []scoring.Weights{
		{scoring.TermTopology: 1, scoring.TermSpread: 100},
		{scoring.TermTopology: 10, scoring.TermFragmentation: 5, scoring.TermBestFit: 2},
	} {
		r, err := Run(c.Clone(), jobs, Config{Params: scoring.Params{Weights: w}, RecordPlacements: true})
		if err != nil {
			t.Fatal(err)
		}
		gang := r.Jobs[1]
		if gang.State != Done || len(gang.Nodes) != 3 {
			t.Fatalf("weights %v: gang %+v", w, gang)
		}
		racks := map[string]bool{}
		for _, name := range gang.Nodes {
			racks[c.Nodes[int(name[1]-'0')].Domains[0]] = true
		}
		if len(racks) != 1 {
			t.Errorf("weights %v: gang members on %v span racks %v", w, gang.Nodes, racks)
		}
	}
}
