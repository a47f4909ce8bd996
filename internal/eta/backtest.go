package eta

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/schedloop/schedloop/internal/sim"
)

// BacktestOptions say which submissions a backtest asks about.
type BacktestOptions struct {
	// MinWait keeps only jobs that waited longer than this in the replay:
	// a job that starts at once is easy to predict and would flatter the
	// error. Zero means DefaultMinWait.
	MinWait time.Duration
	// Samples caps the submissions asked about, drawn with Seed from the
	// jobs that waited long enough; zero asks about all of them.
	Samples int
	Seed    uint64
	// Forecast are the estimate's options (Seed is set per submission).
	Forecast Options
	// Window is the snapshots' (Snapshot.Window): the submissions in it
	// before each asked one are the arrivals its replays draw from. Zero
	// means DefaultWindow; negative draws none.
	Window time.Duration
	// Progress, when set, hears after each submission asked about how
	// many of how many are done.
	Progress func(done, total int)
}

// DefaultMinWait: waits shorter than ten minutes are not what anyone asks
// "when will it start?" about.
const DefaultMinWait = 10 * time.Minute

// Point is one submission asked about: the estimate and the actual start,
// both measured from the submission.
type Point struct {
	Job           string
	Queue         string
	Actual        time.Duration
	P10, P50, P90 time.Duration
	State         State
	// Finished is how many jobs had finished at the submission: below
	// MinErrorSamples the estimate assumed DefaultErrors.
	Finished int
	// Horizon is the estimate's (Estimate.Horizon).
	Horizon time.Duration
}

// Censored reports whether the estimate's median lies past its horizon
// (Estimate.Censored).
func (p Point) Censored() bool {
	return Estimate{State: p.State, P50: p.P50, Horizon: p.Horizon}.Censored()
}

// AbsErrorPct is the median estimate's error relative to the actual wait.
func (p Point) AbsErrorPct() float64 {
	if p.State != Starts {
		return math.Inf(1)
	}
	return 100 * math.Abs(float64(p.P50-p.Actual)) / float64(p.Actual)
}

// Covered reports whether the actual start lies in the p10..p90 interval.
func (p Point) Covered() bool {
	return p.State == Starts && p.P10 <= p.Actual && p.Actual <= p.P90
}

// Backtest replays jobs on c under cfg (the truth), then, at each chosen
// job's submission, builds the snapshot a live cluster would have shown at
// that instant and asks Forecast when the job starts, knowing only what was
// known then: the jobs running (where the replay placed them and for how
// long they had run), the jobs waiting, each job's run time as cfg's
// predictor predicted it at its arrival, and the predictor's error measured
// on the jobs finished before. Jobs submitted later are not in the
// snapshot, as they are not in a live one. cfg.RecordPlacements is set.
func Backtest(ctx context.Context, c *sim.Cluster, jobs []sim.Job, cfg sim.Config, opt BacktestOptions) ([]Point, error) {
	cfg.RecordPlacements = true
	truth, err := sim.RunContext(ctx, c, jobs, cfg)
	if err != nil {
		return nil, fmt.Errorf("backtest: %w", err)
	}
	minWait := cmp.Or(opt.MinWait, DefaultMinWait)
	var asked []int
	for i, o := range truth.Jobs {
		if o.State == sim.Done && o.Preemptions == 0 && o.Start-jobs[i].Arrival > minWait {
			asked = append(asked, i)
		}
	}
	if opt.Samples > 0 && len(asked) > opt.Samples {
		rng := rand.New(rand.NewPCG(opt.Seed, 0x6261636b)) // "back"
		rng.Shuffle(len(asked), func(a, b int) { asked[a], asked[b] = asked[b], asked[a] })
		asked = asked[:opt.Samples]
		slices.Sort(asked)
	}
	snapCfg := cfg
	snapCfg.Predictor, snapCfg.RecordPlacements = nil, false
	window := cmp.Or(opt.Window, DefaultWindow)
	points := make([]Point, 0, len(asked))
	for _, k := range asked {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("backtest: %w", err)
		}
		at := jobs[k].Arrival
		snap, errs, self, finished := snapshotAt(c, jobs, truth, snapCfg, at, k, window)
		fo := opt.Forecast
		fo.Seed = opt.Seed ^ uint64(k)
		fo.Errors = errs
		fo.Asked = []int{askedIndex(snap, self)}
		est, err := Forecast(ctx, snap, fo)
		if err != nil {
			return nil, fmt.Errorf("backtest: job %s at %v: %w", jobs[k].Name, at, err)
		}
		e := est[self]
		points = append(points, Point{Job: jobs[k].Name, Queue: jobs[k].Queue, Actual: truth.Jobs[k].Start - at, P10: e.P10, P50: e.P50, P90: e.P90, State: e.State, Finished: finished, Horizon: e.Horizon})
		if opt.Progress != nil {
			opt.Progress(len(points), len(asked))
		}
	}
	return points, nil
}

// snapshotAt is what a live cluster showed at instant at, just after job k
// was submitted, with the submissions of the window before; self is k's
// index among the snapshot's pending jobs.
func snapshotAt(c *sim.Cluster, jobs []sim.Job, truth sim.Result, cfg sim.Config, at time.Duration, k int, window time.Duration) (Snapshot, ErrorModel, int, int) {
	snap := Snapshot{Cluster: c, Config: cfg}
	if window > 0 {
		snap.Window = window
		for i, o := range truth.Jobs {
			j := jobs[i]
			if o.State == sim.Unschedulable || j.Arrival <= at-window || j.Arrival > at || j.Arrival == at && i > k {
				continue
			}
			j.Arrival, j.Predicted, j.Queued, j.RunningOn = j.Arrival-at, o.Predicted, 0, nil
			snap.Arrivals = append(snap.Arrivals, j)
		}
	}
	type ended struct {
		at  time.Duration
		obs Observation
	}
	var done []ended
	var obs []Observation
	self := -1
	pending := 0
	for i, o := range truth.Jobs {
		j := jobs[i]
		switch {
		case o.State == sim.Done && o.End <= at:
			done = append(done, ended{o.End, Observation{Predicted: o.Predicted, Ran: o.End - o.Start, Finished: true, Began: o.Start - at}})
		case o.State == sim.Done && o.Start < at:
			sj := j
			sj.RunningOn, sj.Predicted, sj.Queued = o.Nodes, o.Predicted, 0
			snap.Jobs = append(snap.Jobs, Job{Job: sj, Elapsed: at - o.Start})
			obs = append(obs, Observation{Predicted: o.Predicted, Ran: at - o.Start, Began: o.Start - at})
		case o.State != sim.Unschedulable && (j.Arrival < at || j.Arrival == at && i <= k):
			sj := j
			sj.RunningOn, sj.Predicted, sj.Queued = nil, o.Predicted, at-j.Arrival
			if i == k {
				self = pending
			}
			snap.Jobs = append(snap.Jobs, Job{Job: sj})
			pending++
		}
	}
	slices.SortStableFunc(done, func(a, b ended) int { return cmp.Compare(a.at, b.at) })
	for _, d := range done {
		obs = append(obs, d.obs)
	}
	return snap, NewErrorModel(obs), self, len(done)
}

// askedIndex is the index among snap's jobs of its self-th pending one.
func askedIndex(snap Snapshot, self int) int {
	for i := range snap.Jobs {
		if !snap.Jobs[i].Running() {
			if self == 0 {
				return i
			}
			self--
		}
	}
	return -1
}

// Summary is a backtest's headline: the median absolute error of the
// median estimate, in percent of the actual wait, and the share of actual
// starts inside the p10..p90 interval.
type Summary struct {
	Points            int
	MedianAbsErrorPct float64
	IntervalCoverage  float64
	// Censored counts the points whose median lay past its horizon: their
	// error is that of a lower bound.
	Censored int
}

// Summarise reads the headline from points.
func Summarise(points []Point) Summary {
	s := Summary{Points: len(points)}
	if len(points) == 0 {
		return s
	}
	errs := make([]float64, len(points))
	covered := 0
	for i, p := range points {
		errs[i] = p.AbsErrorPct()
		if p.Covered() {
			covered++
		}
		if p.Censored() {
			s.Censored++
		}
	}
	slices.Sort(errs)
	n := len(errs)
	if n%2 == 1 {
		s.MedianAbsErrorPct = errs[n/2]
	} else {
		s.MedianAbsErrorPct = (errs[n/2-1] + errs[n/2]) / 2
	}
	s.IntervalCoverage = float64(covered) / float64(n)
	return s
}
