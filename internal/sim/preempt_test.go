package sim

import (
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
)

// replayPreempting replays jobs on 2 nodes of 8 GPUs with preemption on
// and returns the outcomes by job name.
func replayPreempting(t *testing.T, p scoring.Params, jobs ...Job) map[string]Outcome {
	t.Helper()
	p.Weights = scoring.Weights{scoring.TermBinPack: 1}
	res, err := Run(cluster(2, 8), jobs, Config{Params: p, Preemption: true, RecordPlacements: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Outcome{}
	for i, o := range res.Jobs {
		out[jobs[i].Name] = o
	}
	return out
}

// Two 5-GPU jobs fill one node each; a gang of 2 x 3 GPUs takes the rest,
// a member on each node. A high-priority 3-GPU pod evicts the gang whole
// (both members, one on a node the pod does not use), since it loses fewest
// GPU-hours, and leaves no member running.
func TestPreemptionEvictsAWholeGang(t *testing.T) {
	o := replayPreempting(t, scoring.Params{},
		job("old-a", 0, 1000, 1, 5), job("old-b", 0, 1000, 1, 5),
		job("gang", 90, 1000, 2, 3),
		prio(job("high", 100, 10, 1, 3), 100))
	if o["gang"].Preemptions != 1 || o["old-a"].Preemptions+o["old-b"].Preemptions != 0 {
		t.Fatalf("preemptions: gang %d, old-a %d, old-b %d; want the gang's alone",
			o["gang"].Preemptions, o["old-a"].Preemptions, o["old-b"].Preemptions)
	}
	if o["high"].Start != sec(100) || o["high"].Evicted != 1 {
		t.Errorf("high: %+v, want started at 100s evicting one job", o["high"])
	}
	// Both members were stopped: the gang restarts whole, across both
	// nodes again, once high ends.
	if g := o["gang"]; g.Start != sec(110) || len(g.Nodes) != 2 || g.Nodes[0] == g.Nodes[1] {
		t.Errorf("gang: %+v, want a whole restart at 110s on both nodes", g)
	}
}

// Old jobs have run long; a young gang of 2 x 4 GPUs has run 10 s (80
// GPU-s) where either old 4-GPU job has run 100 s (400 GPU-s): the gang goes
// though it is two pods. Once it has run longer it is the dearer victim.
func TestPreemptionLosesFewestGPUHours(t *testing.T) {
	o := replayPreempting(t, scoring.Params{},
		job("old-a", 0, 1000, 1, 4), job("old-b", 0, 1000, 1, 4),
		job("gang", 90, 1000, 2, 4),
		prio(job("high", 100, 10, 1, 4), 100))
	if o["gang"].Preemptions != 1 {
		t.Errorf("the cheapest victim (the young gang) was not evicted: %+v", o)
	}
	o = replayPreempting(t, scoring.Params{},
		job("old-a", 0, 1000, 1, 4), job("old-b", 50, 1000, 1, 4),
		job("gang", 60, 1000, 2, 4),
		prio(job("high", 100, 10, 1, 4), 100))
	// old-b: 4 GPUs x 50 s = 200; gang: 8 GPUs x 40 s = 320; old-a: 400.
	if o["old-b"].Preemptions != 1 || o["gang"].Preemptions+o["old-a"].Preemptions != 0 {
		t.Errorf("want old-b alone evicted: old-a %d, old-b %d, gang %d",
			o["old-a"].Preemptions, o["old-b"].Preemptions, o["gang"].Preemptions)
	}
}

func TestPreemptionSparesNonPreemptibleAndYoungJobs(t *testing.T) {
	serve := job("serve", 0, 1000, 1, 8)
	serve.NonPreemptible = true
	o := replayPreempting(t, scoring.Params{},
		serve, job("train", 0, 1000, 1, 8), prio(job("high", 100, 10, 1, 8), 100))
	if o["serve"].Preemptions != 0 || o["train"].Preemptions != 1 {
		t.Errorf("serve %d, train %d preemptions; want train's alone", o["serve"].Preemptions, o["train"].Preemptions)
	}
	o = replayPreempting(t, scoring.Params{},
		serve, job("train", 0, 1000, 1, 8), prio(job("high", 100, 10, 1, 8), 100), prio(job("high2", 101, 10, 1, 8), 100))
	if o["serve"].Preemptions != 0 || o["high2"].Start != sec(110) {
		t.Errorf("a second high job must wait for the first, not evict serve: serve %d, high2 %+v", o["serve"].Preemptions, o["high2"])
	}
	// Minimum run time 5 minutes: train (100 s old) is spared. Nothing is
	// released when it comes of age, and a waiting job is tried again only
	// when something is, so high starts when train ends.
	o = replayPreempting(t, scoring.Params{PreemptMinRunTime: 5 * time.Minute},
		serve, job("train", 0, 1000, 1, 8), prio(job("high", 100, 10, 1, 8), 100))
	if o["train"].Preemptions != 0 || o["high"].Start != sec(1000) {
		t.Errorf("young train: %d preemptions, high started %v; want none, and high after train ends (1000s)",
			o["train"].Preemptions, o["high"].Start)
	}
}
