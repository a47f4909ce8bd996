package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
)

func pinnedOn(j Job, nodes ...string) Job { j.RunningOn = nodes; return j }

// A replay that starts from a snapshot keeps the running jobs where they
// are: a waiting job starts when the running one it needs leaves, and the
// placement it takes is the one left free.
func TestReplayFromSnapshot(t *testing.T) {
	bin := Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}, RecordPlacements: true}
	jobs := []Job{
		pinnedOn(job("held-a", 0, 300, 1, 8), "a"),
		pinnedOn(job("held-b", 0, 50, 2, 4), "b", "b"),
		job("next", 0, 10, 1, 8),
		job("gang", 1, 10, 2, 8),
	}
	res := checkStarts(t, cluster(2, 8), jobs, bin, []time.Duration{0, 0, sec(50), sec(300)})
	if got := res.Jobs[2].Nodes; len(got) != 1 || got[0] != "b" {
		t.Errorf("next placed on %v, want [b]: a is held by a pinned job", got)
	}
}

func TestReplayFromSnapshotRefusesInconsistentState(t *testing.T) {
	c := cluster(2, 8)
	for _, tc := range []struct {
		name string
		jobs []Job
		want string
	}{
		{"unknown node", []Job{pinnedOn(job("x", 0, 10, 1, 8), "zz")}, `node "zz"`},
		{"over capacity", []Job{pinnedOn(job("x", 0, 10, 1, 8), "a"), pinnedOn(job("y", 0, 10, 1, 1), "a")}, `running job y: member 0 does not fit on node "a"`},
		{"member count", []Job{pinnedOn(job("x", 0, 10, 2, 1), "a")}, "1 nodes for 2 members"},
		{"found after an arrival", []Job{job("w", 0, 10, 1, 1), pinnedOn(job("x", 5, 10, 1, 1), "a")}, "after a job arrives"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(c, tc.jobs, Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A pending job of a snapshot keeps its place in the queue: one that has
// waited longer goes first under arrival order, though both enter the
// replay at the same instant.
func TestSnapshotPendingJobsKeepTheirQueuePlace(t *testing.T) {
	bin := Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}}
	younger := job("a-younger", 0, 10, 1, 8)
	younger.Queued = sec(5)
	older := job("b-older", 0, 10, 1, 8)
	older.Queued = sec(60)
	jobs := []Job{pinnedOn(job("held", 0, 30, 1, 8), "a"), younger, older}
	checkStarts(t, cluster(1, 8), jobs, bin, []time.Duration{0, sec(40), sec(30)})
}
