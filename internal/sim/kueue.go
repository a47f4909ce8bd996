package sim

import (
	"context"
	"fmt"
	"maps"
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

// KueueJob is one job's Kueue Workload: its ClusterQueue and its requests,
// per resource with the flavours left to the replay (Ask) or per
// flavour-resource already chosen (Req, when Ask is nil), as
// kueuereplay.Workload.
type KueueJob struct {
	Queue string
	Ask   map[string]int64
	Req   map[scoring.FlavorResource]int64
}

// KueueOutcome is what Kueue did in a replay behind it: its admissions and
// evictions (kueuereplay's clock starts at the zero time.Time, the replay's
// 0) and when each job was last admitted (absent: never). Passes counts the
// quota replays run (see runBehindKueue); Settled is false when the last
// pass still moved how long some job held its quota.
type KueueOutcome struct {
	Quota    kueuereplay.Result
	Admitted map[string]time.Duration
	Passes   int
	Settled  bool
}

// maxKueuePasses bounds runBehindKueue's passes. Each pass after the first
// only runs while an admitted job waited for capacity, so most replays take
// one or two.
const maxKueuePasses = 4

// runBehindKueue replays jobs with Kueue in front of the scheduler: Kueue's
// admission is replayed first (kueuereplay, whose quota rules are
// internal/scoring's); then the jobs are placed by Run, each behind Kueue
// arriving when it was last admitted and ordered as submitted at its own
// arrival (its pods exist, gated, from then); its wait and completion time
// count from its arrival, quota wait included. A job evicted to reclaim
// quota restarts from its last admission, as Kueue's eviction restarts it;
// the run the reclaim cut short holds no GPUs in the placement replay. A
// job Kueue never admitted is Unfinished, never started.
//
// Kueue reserves a workload's quota from QuotaReserved until it finishes or
// is evicted, so a job that waits for capacity after its admission holds
// its ClusterQueue's quota through that wait too. The first pass holds
// each job's quota for its Duration from admission; while the placement
// shows a job holding it longer (admitted, then waiting for nodes), the
// quota replay runs again with each job's hold taken from the last
// placement (its end less its admission; a job never placed holds it to
// the placement's last end), up to maxKueuePasses.
func runBehindKueue(ctx context.Context, c *Cluster, jobs []Job, cfg Config) (Result, error) {
	front := *cfg.Kueue
	cfg.Kueue = nil
	for _, j := range jobs {
		if _, ok := front.Jobs[j.Name]; ok && j.RunningOn != nil {
			return Result{}, fmt.Errorf("replay behind kueue: job %s: a running snapshot job cannot be readmitted", j.Name)
		}
	}
	hold := map[string]time.Duration{}
	for _, j := range jobs {
		if _, ok := front.Jobs[j.Name]; ok {
			hold[j.Name] = j.Duration
		}
	}
	var out Result
	for pass := 1; ; pass++ {
		res, index, admitted, quota, err := placeBehindKueue(ctx, c, jobs, cfg, front, hold)
		if err != nil {
			return Result{}, err
		}
		next := kueueHolds(jobs, front, hold, res, index, admitted)
		settled := maps.Equal(next, hold)
		out = Result{Metrics: res.Metrics, Jobs: make([]Outcome, len(jobs)),
			Kueue: &KueueOutcome{Quota: quota, Admitted: admitted, Passes: pass, Settled: settled}}
		for i := range out.Jobs {
			out.Jobs[i].State = Unfinished
		}
		for k, i := range index {
			out.Jobs[i] = res.Jobs[k]
		}
		// res measured the placed jobs that are not warm-up; the others
		// Kueue never admitted.
		measured := 0
		for i := range jobs {
			if !jobs[i].Warmup {
				measured++
			}
		}
		out.Metrics.Jobs = measured
		out.Metrics.Unfinished += measured - res.Metrics.Jobs
		if settled || pass == maxKueuePasses {
			return out, nil
		}
		hold = next
	}
}

// placeBehindKueue is one pass of runBehindKueue: the quota replay with
// each job holding its quota for hold[name] once admitted, then the
// placement of what it admitted. index maps the placed jobs to jobs.
func placeBehindKueue(ctx context.Context, c *Cluster, jobs []Job, cfg Config, front KueueFront, hold map[string]time.Duration) (Result, []int, map[string]time.Duration, kueuereplay.Result, error) {
	// The replay's clock starts at 0; kueuereplay's is wall time from an
	// arbitrary origin, the same for every workload.
	var origin time.Time
	var wls []kueuereplay.Workload
	for _, j := range jobs {
		kj, ok := front.Jobs[j.Name]
		if !ok {
			continue
		}
		wls = append(wls, kueuereplay.Workload{Key: j.Name, Queue: kj.Queue, Ask: kj.Ask, Req: kj.Req, Priority: j.Priority,
			Arrive: origin.Add(j.Arrival), Run: hold[j.Name]})
	}
	// Replays run in parallel on one Config: each plays its own copy.
	quota, err := kueuereplay.Replay(kueuereplay.Clone(front.Cohort), wls, front.FairSharing)
	if err != nil {
		return Result{}, nil, nil, kueuereplay.Result{}, fmt.Errorf("replay behind kueue: %w", err)
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
	res, err := RunContext(ctx, c, placed, cfg)
	if err != nil {
		return Result{}, nil, nil, kueuereplay.Result{}, err
	}
	return res, index, admitted, quota, nil
}

// kueueHolds is how long each job behind Kueue held its quota from its
// last admission in a placement: to its end; one admitted but never
// placed to the placement's last end, or its Duration past its admission
// if that is later. A job never admitted keeps its previous hold.
func kueueHolds(jobs []Job, front KueueFront, prev map[string]time.Duration, res Result, index []int, admitted map[string]time.Duration) map[string]time.Duration {
	var last time.Duration
	for _, o := range res.Jobs {
		if o.State == Done || o.State == Running {
			last = max(last, o.End)
		}
	}
	next := maps.Clone(prev)
	for k, i := range index {
		j := jobs[i]
		if _, behind := front.Jobs[j.Name]; !behind {
			continue
		}
		at := admitted[j.Name]
		switch o := res.Jobs[k]; o.State {
		case Done, Running:
			next[j.Name] = max(o.End-at, j.Duration)
		default:
			next[j.Name] = max(last-at, j.Duration)
		}
	}
	return next
}
