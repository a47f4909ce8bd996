package eta

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/schedloop/schedloop/internal/sim"
)

// Job is one job of a snapshot. A running job has RunningOn set (one node
// per member) and Elapsed, how long it has run; a pending job has Queued,
// how long it has waited. Predicted is the predictor's whole run time for
// either (zero: the caller had no prediction, and DefaultRunTime stands
// in). Arrival is ignored: every job of a snapshot is there at its start.
type Job struct {
	sim.Job
	Elapsed time.Duration
}

// Running reports whether the snapshot found the job running.
func (j *Job) Running() bool { return len(j.RunningOn) > 0 }

// Snapshot is the cluster an estimate starts from: its nodes, its jobs and
// the profile the scheduler applies (Config's Predictor must be nil: the
// predictions are the jobs' own).
type Snapshot struct {
	Cluster *sim.Cluster
	Jobs    []Job
	Config  sim.Config
	// Arrivals are the jobs submitted in the Window before the snapshot,
	// whether they have finished, run or wait now, each with Arrival the
	// instant of its submission (-Window < Arrival <= 0) and Predicted its
	// run time as predicted then. Each replay draws the jobs submitted
	// after the snapshot from them (futureArrivals): later jobs ordered
	// ahead of a waiting one (by priority, fair share, shortest service) or
	// backfilled into the gaps it waits for delay it, and a replay of the
	// snapshot's jobs alone starts it too early. No arrivals or no Window:
	// the snapshot's jobs are the only ones.
	Arrivals []sim.Job
	Window   time.Duration
}

// DefaultRunTime stands in for a job the caller has no prediction for,
// the predictor's own default for a job with no history.
const DefaultRunTime = time.Hour

// Options are how an estimate is made.
type Options struct {
	// Runs is how many forward replays are drawn; the interval's ends are
	// quantiles over them. Zero means DefaultRuns.
	Runs int
	// Seed makes the draws repeatable: one snapshot, one seed, one answer.
	Seed uint64
	// Errors is the predictor's measured error; the zero value is
	// DefaultErrors.
	Errors ErrorModel
	// Workers bounds the replays run at once; zero means GOMAXPROCS.
	Workers int
	// Asked, when set, are the pending jobs (indices into the snapshot's
	// Jobs) whose starts the caller reads: the later submissions are drawn
	// only as far ahead as they wait, not as far as the last pending job
	// does. Their estimates are the same either way (a submission after a
	// job's start cannot move it); the other jobs' may be cut short. Empty:
	// every pending job.
	Asked []int
}

// DefaultRuns is enough draws for a p10..p90 interval to move by less
// than a draw's spacing between seeds (each job's draws are stratified,
// see draws), and few enough to estimate a 10,000-GPU cluster's pending
// jobs within a second.
const DefaultRuns = 10

// MaxRuns bounds Runs: past it the interval no longer narrows, only the
// cost grows.
const MaxRuns = 1000

// Validate names the first field out of range.
func (o Options) Validate() error {
	switch {
	case o.Runs < 0 || o.Runs > MaxRuns:
		return fmt.Errorf("field runs: %d is outside 0..%d", o.Runs, MaxRuns)
	case o.Workers < 0:
		return fmt.Errorf("field workers: %d is negative", o.Workers)
	}
	return nil
}

// State is what an estimate found for a pending job.
type State string

const (
	// Starts: the job starts in at least half of the runs.
	Starts State = "starts"
	// NeverFits: the job is larger than the empty cluster or its queue's
	// limit; it cannot start whatever else happens (Reason says why).
	NeverFits State = "never-fits"
	// NotStarted: in half the runs or more the job did not start once
	// every other job had run: what it waits for never comes (a
	// reservation or a limit held by jobs that never end).
	NotStarted State = "not-started"
)

// Never is a start that did not come in a run.
const Never = time.Duration(math.MaxInt64)

// Estimate is one pending job's expected start, measured from the
// snapshot.
type Estimate struct {
	Job   string
	State State
	// P10, P50, P90 are quantiles of the start over the runs (zero: it
	// starts at once). Meaningful when State is Starts; P90 is Never when
	// the job did not start in a tenth of the runs.
	P10, P50, P90 time.Duration
	// Nodes are the nodes the job takes in the run whose start is the
	// median.
	Nodes []string
	// WaitsFor names the jobs whose ends free the nodes it takes in that
	// run, running jobs first (empty when it starts at once or takes
	// nodes nobody released).
	WaitsFor []string
	// Reason explains a NeverFits or NotStarted state.
	Reason string
	// Horizon is how far ahead later submissions were drawn at most
	// (drawBound; zero: none were drawn). A quantile past it is a start
	// in a replay whose submissions stopped there: censored, the job is
	// expected to start no earlier, and likely later.
	Horizon time.Duration
}

// Censored reports whether the median start lies past the horizon later
// submissions were drawn to: "not before P50" rather than "at P50".
func (e Estimate) Censored() bool {
	return e.State == Starts && e.Horizon > 0 && e.P50 > e.Horizon
}

// Forecast runs the snapshot forward opt.Runs times and returns an
// estimate for every pending job, in snapshot order.
func Forecast(ctx context.Context, snap Snapshot, opt Options) ([]Estimate, error) {
	if err := opt.Validate(); err != nil {
		return nil, fmt.Errorf("estimate: %w", err)
	}
	if snap.Config.Predictor != nil {
		return nil, fmt.Errorf("estimate: field predictor: a snapshot carries its predictions in its jobs")
	}
	runs := cmp.Or(opt.Runs, DefaultRuns)
	errs := opt.Errors
	if errs.empty() {
		errs = DefaultErrors()
	}
	if err := snap.validArrivals(); err != nil {
		return nil, err
	}
	base, pending, err := prepare(snap)
	if err != nil {
		return nil, err
	}
	waitedFor := pending
	if len(opt.Asked) > 0 {
		for _, i := range opt.Asked {
			if i < 0 || i >= len(snap.Jobs) || snap.Jobs[i].Running() {
				return nil, fmt.Errorf("estimate: field asked: %d is not a pending job of the snapshot", i)
			}
		}
		waitedFor = opt.Asked
	}
	// One more row of draws: each run's shared factor (ErrorModel.Shift).
	u := draws(len(snap.Jobs)+1, runs, opt.Seed)
	shared := u[len(snap.Jobs)*runs:]
	results := make([]sim.Result, runs)
	bound := drawBound(snap, base)
	workers := min(cmp.Or(opt.Workers, runtime.GOMAXPROCS(0)), runs)
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			jobs := make([]sim.Job, len(base))
			for r := range next {
				jobs = jobs[:len(base)]
				copy(jobs, base)
				factor := errs.sharedFactor(shared[r])
				for i := range base {
					jobs[i].Duration = sampleRunTime(&snap.Jobs[i], errs, factor, u[i*runs+r])
				}
				cfg := snap.Config
				cfg.RecordPlacements = true
				cfg.StopOnceStarted = len(base)
				var res sim.Result
				var err error
				// Arrivals are drawn up to a horizon, doubled while a
				// pending job has not started within it: a job that
				// waits a day meets a day of later jobs, and drawing
				// them for every estimate would cost the short waits
				// as much as the long. The horizon stops at bound
				// (drawBound); a start past it is censored there.
				for horizon := min(snap.Window/firstHorizonShare, bound); ; horizon = min(2*horizon, bound) {
					jobs = futureArrivals(jobs[:len(base)], snap, errs, factor, horizon, opt.Seed, r)
					res, err = sim.RunContext(ctx, snap.Cluster, jobs, cfg)
					if err != nil || snap.Window <= 0 || len(snap.Arrivals) == 0 || horizon >= bound || allStartedBy(res, waitedFor, horizon) {
						break
					}
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				results[r] = res
				mu.Unlock()
			}
		}()
	}
	for r := 0; r < runs && ctx.Err() == nil; r++ {
		next <- r
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("estimate: %w", err)
	}
	if firstErr != nil {
		return nil, fmt.Errorf("estimate: %w", firstErr)
	}
	out := make([]Estimate, 0, len(pending))
	for _, i := range pending {
		e := summarise(snap, base, results, i)
		if snap.Window > 0 && len(snap.Arrivals) > 0 {
			e.Horizon = bound
		}
		out = append(out, e)
	}
	return out, nil
}

// validArrivals names the first arrival outside the window.
func (s Snapshot) validArrivals() error {
	if s.Window < 0 {
		return fmt.Errorf("estimate: field window: %v is negative", s.Window)
	}
	for i := range s.Arrivals {
		a := &s.Arrivals[i]
		if a.Arrival > 0 || a.Arrival <= -s.Window {
			return fmt.Errorf("estimate: arrival %s: submitted at %v, outside the window (-%v, 0]", a.Name, a.Arrival, s.Window)
		}
		if a.Members < 1 || a.Predicted < 0 || len(a.RunningOn) > 0 {
			return fmt.Errorf("estimate: arrival %s: %d members, predicted %v, running on %v: an arrival has members, no negative prediction and no nodes", a.Name, a.Members, a.Predicted, a.RunningOn)
		}
	}
	return nil
}

// DefaultWindow is how far back the submissions the future ones are
// drawn from reach: a day, the cycle submissions follow, so a wait of any
// length meets the day's mix rather than the last hour's.
const DefaultWindow = 24 * time.Hour

// prepare turns the snapshot into the replay's jobs, every one present at
// instant zero: running ones pinned with what the scheduler predicts of
// their rest, pending ones queued with the wait they have behind them.
func prepare(snap Snapshot) ([]sim.Job, []int, error) {
	if snap.Cluster == nil || len(snap.Cluster.Nodes) == 0 {
		return nil, nil, fmt.Errorf("estimate: field cluster: the snapshot has no nodes")
	}
	base := make([]sim.Job, len(snap.Jobs))
	var pending []int
	for i := range snap.Jobs {
		j := snap.Jobs[i]
		if j.Elapsed < 0 || j.Queued < 0 || j.Predicted < 0 {
			return nil, nil, fmt.Errorf("estimate: job %s: elapsed %v, queued %v, predicted %v: none may be negative", j.Name, j.Elapsed, j.Queued, j.Predicted)
		}
		sj := j.Job
		sj.Arrival = 0
		predicted := cmp.Or(j.Predicted, DefaultRunTime)
		if j.Running() {
			// The scheduler predicts an end at start + predicted: a job
			// past its prediction is expected to end now.
			sj.Predicted = max(predicted-j.Elapsed, 0)
			sj.Queued = 0
		} else {
			sj.Predicted = predicted
			pending = append(pending, i)
		}
		base[i] = sj
	}
	return base, pending, nil
}

// draws are the uniform variates of each job in each run, stratified: a
// job's runs take one draw from each of runs equal slices of (0,1), in a
// seeded order, so even ten runs cover a job's whole run-time
// distribution instead of clustering by chance.
func draws(jobs, runs int, seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 0x657461)) // "eta"
	u := make([]float64, jobs*runs)
	perm := make([]int, runs)
	for i := 0; i < jobs; i++ {
		for r := range perm {
			perm[r] = r
		}
		rng.Shuffle(runs, func(a, b int) { perm[a], perm[b] = perm[b], perm[a] })
		for r := 0; r < runs; r++ {
			u[i*runs+r] = (float64(perm[r]) + rng.Float64()) / float64(runs)
		}
	}
	return u
}

// sampleRunTime draws what a job still runs: its prediction scaled by the
// run's shared factor and a draw from the predictor's error. A running job
// is drawn given that it has already run Elapsed: from the ratios beyond
// the one it reached while it is within its prediction, and once it has
// outlived its prediction, which then says little, from the run times of
// the jobs that ran at least as long (with no measured run times, from the
// ratios still). Drawing an outlived job's rest from ratios alone makes
// it end almost at once (ratios crowd just past any point), and a backtest
// on Philly estimated waits five times too short.
func sampleRunTime(j *Job, errs ErrorModel, factor, u float64) time.Duration {
	predicted := float64(cmp.Or(j.Predicted, DefaultRunTime)) * factor
	if !j.Running() {
		return bounded(predicted * errs.Quantile(u))
	}
	elapsed := float64(j.Elapsed)
	var total float64
	if elapsed > predicted && !errs.runTime.empty() {
		total = errs.runTime.conditional(j.Elapsed.Seconds(), u) * float64(time.Second)
	} else {
		total = predicted * errs.ratio.conditional(elapsed/predicted, u)
	}
	return bounded(total - elapsed)
}

// MaxRunTime bounds a drawn run time: a draw far in the heavy tail (or a
// float past what a Duration holds, which converts to a negative one)
// means "longer than any estimate can see", and a decade says that.
const MaxRunTime = 10 * 365 * 24 * time.Hour

// bounded is a drawn run time in nanoseconds, at least a second and at
// most MaxRunTime.
func bounded(ns float64) time.Duration {
	return time.Duration(math.Min(math.Max(ns, float64(time.Second)), float64(MaxRunTime)))
}

// summarise reads job i's starts over the runs.
func summarise(snap Snapshot, base []sim.Job, results []sim.Result, i int) Estimate {
	j := &snap.Jobs[i]
	e := Estimate{Job: j.Name}
	if results[0].Jobs[i].State == sim.Unschedulable {
		e.State, e.Reason = NeverFits, neverFitsReason(snap, &base[i])
		return e
	}
	type start struct {
		at  time.Duration
		run int
	}
	starts := make([]start, len(results))
	for r, res := range results {
		o := res.Jobs[i]
		at := Never
		if started(o) {
			at = o.Start
		}
		starts[r] = start{at, r}
	}
	slices.SortFunc(starts, func(a, b start) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.run, b.run)) })
	q := func(p float64) start { return starts[min(int(p*float64(len(starts))), len(starts)-1)] }
	at := make([]time.Duration, len(starts))
	for r, st := range starts {
		at[r] = st.at
	}
	e.P10, e.P50, e.P90 = quantile(at, 0.1), quantile(at, 0.5), quantile(at, 0.9)
	if e.P50 == Never {
		e.State = NotStarted
		e.Reason = "in most runs it had not started when every other job had ended: what it waits for never frees"
		return e
	}
	e.State = Starts
	med := results[q(0.5).run]
	e.Nodes = med.Jobs[i].Nodes
	e.WaitsFor = waitsFor(snap, med, i)
	return e
}

// quantile is the p-quantile of sorted draws at the plotting position
// p(n+1), interpolated between neighbours: a draw falls below the k-th of n
// with probability k/(n+1), so the interval between the p10 and p90 read
// this way holds 80% of starts. Reading the k-th draw at pn instead (the
// second and tenth of ten) holds 8/11, 73%: a backtest measured 0.73.
// A quantile next to a run where the job never started is Never.
func quantile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	x := p*float64(n+1) - 1 // zero-based position
	switch {
	case x <= 0:
		return sorted[0]
	case x >= float64(n-1):
		return sorted[n-1]
	}
	k := int(x)
	lo, hi := sorted[k], sorted[k+1]
	if lo == Never || hi == Never {
		if x-float64(k) == 0 {
			return lo
		}
		return Never
	}
	return lo + time.Duration((x-float64(k))*float64(hi-lo))
}

// waitsFor names the jobs that ended at job i's start on a node it takes:
// the releases it waited for.
func waitsFor(snap Snapshot, res sim.Result, i int) []string {
	o := res.Jobs[i]
	if o.Start == 0 {
		return nil
	}
	takes := map[string]bool{}
	for _, n := range o.Nodes {
		takes[n] = true
	}
	var runningJobs, pendingJobs []string
	for k, ok := range res.Jobs[:len(snap.Jobs)] {
		if k == i || ok.State != sim.Done || ok.End != o.Start || !slices.ContainsFunc(ok.Nodes, func(n string) bool { return takes[n] }) {
			continue
		}
		if snap.Jobs[k].Running() {
			runningJobs = append(runningJobs, snap.Jobs[k].Name)
		} else {
			pendingJobs = append(pendingJobs, snap.Jobs[k].Name)
		}
	}
	return append(runningJobs, pendingJobs...)
}

// started reports whether a replay started the job (a replay stops once
// every job of the snapshot has started, so some are still running).
func started(o sim.Outcome) bool { return o.State == sim.Done || o.State == sim.Running }

// allStartedBy reports whether every pending job started in res, no later
// than horizon.
func allStartedBy(res sim.Result, pending []int, horizon time.Duration) bool {
	for _, i := range pending {
		o := res.Jobs[i]
		if o.State == sim.Unschedulable {
			continue
		}
		if !started(o) || o.Start > horizon {
			return false
		}
	}
	return true
}

// firstHorizonShare: the first horizon is this share of the window, as
// most waits estimated are far shorter than the day a window holds.
const firstHorizonShare = 8

// drawBound is as far ahead as later submissions are drawn: one window
// past the instant a perfectly packed cluster would have worked off every
// job of the snapshot (its predicted remaining GPU-time) while also
// serving the submissions drawn meanwhile, at the window's rate of
// predicted GPU-time, i.e. the snapshot's work over the capacity the
// submissions leave spare (a fluid queue's busy period). By then nothing
// the snapshot holds can keep a job waiting; one still waiting a whole
// window of submissions later is held back by the submissions themselves
// (ordered ahead of it, or backfilled into every gap it needs), and how
// long depends on a lull that a window repeated cannot foresee. When the
// drawn submissions alone fill the cluster the backlog never drains and
// no horizon is enough: the bound is then the snapshot's work over the
// whole capacity, plus the window. Its replays are censored at the bound
// (Estimate.Horizon). A horizon doubled up to 64 windows instead replayed
// weeks of an overloaded cluster's submissions for a backfill-starved
// gang, and a backtest at three times Philly's load did not finish.
func drawBound(snap Snapshot, base []sim.Job) time.Duration {
	if snap.Window <= 0 || len(snap.Arrivals) == 0 {
		return 0
	}
	capacity := float64(snap.Cluster.GPUMilli())
	var work, rate float64
	for i := range base {
		// prepare left a running job's Predicted at what remains of it
		// and a pending one's at DefaultRunTime when it had none.
		work += float64(base[i].DemandMilli()) * float64(base[i].Predicted)
	}
	for i := range snap.Arrivals {
		a := &snap.Arrivals[i]
		rate += float64(a.DemandMilli()) * float64(cmp.Or(a.Predicted, DefaultRunTime))
	}
	rate /= float64(snap.Window)
	spare := capacity - rate
	if spare <= 0 {
		spare = capacity
	}
	return snap.Window + bounded(work/spare)
}

// futureArrivals appends to jobs the jobs a replay draws as submitted
// after the snapshot, up to horizon: the recent window's submissions
// repeated window after window, each window's shifted by its own random
// phase (so a burst of submissions stays a burst but lands anywhere) and
// each submission repeated a Poisson(1) number of times (the bootstrap of
// a rate measured from one window: a window of ten submissions may as
// well have been one of seven or fourteen). Their run times are drawn as
// a pending job's are, with the run's shared factor. The draws depend
// only on seed, run and window, so a longer horizon extends a shorter
// one's arrivals.
func futureArrivals(jobs []sim.Job, snap Snapshot, errs ErrorModel, factor float64, horizon time.Duration, seed uint64, run int) []sim.Job {
	w := snap.Window
	if w <= 0 || len(snap.Arrivals) == 0 {
		return jobs
	}
	rng := rand.New(rand.NewPCG(seed^0x667574757265, uint64(run))) // "future"
	for start := time.Duration(0); start < horizon; start += w {
		phase := time.Duration(rng.Int64N(int64(w)))
		block := int(start / w)
		for k := range snap.Arrivals {
			a := &snap.Arrivals[k]
			// At its age ago, the same position in each window ahead.
			at := start + (w+a.Arrival+phase)%w
			for c := poisson1(rng); c > 0; c-- {
				// Drawn whether or not it falls within the horizon, so
				// a longer horizon draws the same jobs before it.
				u := rng.Float64()
				if at >= horizon {
					continue
				}
				j := *a
				j.Name = fmt.Sprintf("%s~%d.%d", a.Name, block, c)
				j.Arrival, j.Queued, j.RunningOn = at, 0, nil
				j.Duration = sampleRunTime(&Job{Job: j}, errs, factor, u)
				jobs = append(jobs, j)
			}
		}
	}
	return jobs
}

// poisson1 draws from the Poisson distribution of mean 1 (Knuth's
// product of uniforms).
func poisson1(rng *rand.Rand) int {
	limit, k, p := math.Exp(-1), 0, rng.Float64()
	for p > limit {
		k++
		p *= rng.Float64()
	}
	return k
}
