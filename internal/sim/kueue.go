package sim

import (
	"fmt"
	"time"

	"github.com/schedloop/schedloop/internal/kueuereplay"
	"github.com/schedloop/schedloop/internal/scoring"
)

// KueueFront is Kueue in front of a replay: the ClusterQueues of its
// cohorts and, by job name, the ClusterQueue each job behind Kueue is
// submitted to and what it asks of each flavour-resource (thousandths, as
// kueuereplay counts). A job not in Jobs does not go through Kueue and
// queues at its arrival as in Run.
type KueueFront struct {
	Cohort      scoring.KueueCohort
	FairSharing bool
	Jobs        map[string]KueueJob
}

// KueueJob is one job's Kueue Workload: its ClusterQueue and its requests.
type KueueJob struct {
	Queue string
	Req   map[scoring.FlavorResource]int64
}

// KueueOutcome is what Kueue did in a replay behind it: its admissions and
// evictions (kueuereplay's clock starts at the zero time.Time, the replay's
// 0) and when each job was last admitted (absent: never).
type KueueOutcome struct {
	Quota    kueuereplay.Result
	Admitted map[string]time.Duration
}

// runBehindKueue replays jobs with Kueue in front of the scheduler: Kueue's
// admission is replayed first (kueuereplay, whose quota rules are
// internal/scoring's), each workload holding its quota from admission for
// its Duration; then the jobs are placed by Run, each behind Kueue arriving
// when it was last admitted and ordered as submitted at its own arrival (its
// pods exist, gated, from then); its wait and completion time count from
// its arrival, quota wait included. A job evicted to reclaim quota restarts
// from its last admission, as Kueue's eviction restarts it; the run the
// reclaim cut short holds no GPUs in the placement replay. Quota is held
// from admission, not from placement: a job that waits for capacity after
// its admission is charged to its ClusterQueue for that wait in Kueue, which
// the quota replay does not see, so it is exact while the cohort's quota
// fits the cluster. A job Kueue never admitted is Unfinished, never started.
func runBehindKueue(c *Cluster, jobs []Job, cfg Config) (Result, error) {
	front := *cfg.Kueue
	cfg.Kueue = nil
	// The replay's clock starts at 0; kueuereplay's is wall time from an
	// arbitrary origin, the same for every workload.
	var origin time.Time
	var wls []kueuereplay.Workload
	for _, j := range jobs {
		kj, ok := front.Jobs[j.Name]
		if !ok {
			continue
		}
		if j.RunningOn != nil {
			return Result{}, fmt.Errorf("replay behind kueue: job %s: a running snapshot job cannot be readmitted", j.Name)
		}
		wls = append(wls, kueuereplay.Workload{Key: j.Name, Queue: kj.Queue, Req: kj.Req, Priority: j.Priority,
			Arrive: origin.Add(j.Arrival), Run: j.Duration})
	}
	// Replays run in parallel on one Config: each plays its own copy.
	quota, err := kueuereplay.Replay(kueuereplay.Clone(front.Cohort), wls, front.FairSharing)
	if err != nil {
		return Result{}, fmt.Errorf("replay behind kueue: %w", err)
	}
	admitted := map[string]time.Duration{}
	for _, ev := range quota.Events {
		if ev.Kind == kueuereplay.Admitted {
			admitted[ev.Key] = ev.At.Sub(origin)
		}
	}
	var placed []Job
	var index []int
	for i, j := range jobs {
		if _, behind := front.Jobs[j.Name]; behind {
			at, ok := admitted[j.Name]
			if !ok {
				continue
			}
			j.Queued += at - j.Arrival
			j.quotaHeld = at - j.Arrival
			j.Arrival = at
		}
		placed = append(placed, j)
		index = append(index, i)
	}
	res, err := Run(c, placed, cfg)
	if err != nil {
		return Result{}, err
	}
	out := Result{Metrics: res.Metrics, Jobs: make([]Outcome, len(jobs)), Kueue: &KueueOutcome{Quota: quota, Admitted: admitted}}
	for i := range out.Jobs {
		out.Jobs[i].State = Unfinished
	}
	for k, i := range index {
		out.Jobs[i] = res.Jobs[k]
	}
	out.Metrics.Jobs = len(jobs)
	out.Metrics.Unfinished += len(jobs) - len(placed)
	return out, nil
}
