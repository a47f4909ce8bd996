package tuner

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
)

// Workload is what candidates are replayed on.
type Workload struct {
	Cluster *sim.Cluster
	Jobs    []sim.Job
	// Kueue, when set, is Kueue in front of the cluster (KueueFrontFromHistory):
	// every replay of the workload admits its jobs by quota before placing
	// them. Nil: no Kueue.
	Kueue *sim.KueueFront
}

// Replays describes the perturbed copies of a workload every candidate is
// evaluated on, so a winner must win across them and not by one lucky order.
type Replays struct {
	// Count is the number of replays; the first is the workload as recorded.
	Count int
	// Jitter moves each arrival by a uniform offset in [-Jitter, +Jitter]
	// in the other replays.
	Jitter time.Duration
	Seed   uint64
}

// Evaluator replays candidates on fixed perturbed copies of a workload.
type Evaluator struct {
	cluster  *sim.Cluster
	replays  [][]sim.Job
	workload scoring.Workload
	base     sim.Config
	workers  int
	mu       sync.Mutex
	count    int
}

// NewEvaluator prepares the replays. base carries the settings that are not
// tuned (preemption, the high-priority threshold).
func NewEvaluator(w Workload, r Replays, base sim.Config) *Evaluator {
	if r.Count < 1 {
		r.Count = 1
	}
	base.Kueue = w.Kueue
	e := &Evaluator{cluster: w.Cluster, base: base, workers: runtime.GOMAXPROCS(0),
		workload: scoring.TypicalWorkload(sim.Requests(w.Jobs), 0.95)}
	for k := 0; k < r.Count; k++ {
		jobs := append([]sim.Job(nil), w.Jobs...)
		if k > 0 && r.Jitter > 0 {
			rng := rand.New(rand.NewPCG(r.Seed, uint64(k)))
			for i := range jobs {
				d := time.Duration((rng.Float64()*2 - 1) * float64(r.Jitter))
				jobs[i].Arrival = max(jobs[i].Arrival+d, 0)
			}
		}
		e.replays = append(e.replays, jobs)
	}
	return e
}

// Evaluation is a candidate's outcome on each replay.
type Evaluation struct {
	PerReplay []Values
	// Prediction is how well the replays' run-time predictions (made at
	// each submission from the jobs the replay had finished) matched the
	// run times, on the first replay (the history as recorded).
	Prediction predict.Accuracy
}

// Mean averages each metric over the replays.
func (ev Evaluation) Mean() Values {
	out := Values{}
	for _, v := range ev.PerReplay {
		for m, x := range v {
			out[m] += x / float64(len(ev.PerReplay))
		}
	}
	return out
}

// Evaluations counts the replays run so far.
func (e *Evaluator) Evaluations() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.count
}

// Evaluate replays c on every replay, in parallel.
func (e *Evaluator) Evaluate(ctx context.Context, c Candidate) (Evaluation, error) {
	cfg := e.base
	// Every field the candidate carries is replayed, the queue policy's
	// included: a field the replay ignored could never be tuned.
	cfg.Params, cfg.Workload = c.Params.Clone(), e.workload
	out := Evaluation{PerReplay: make([]Values, len(e.replays))}
	errs := make([]error, len(e.replays))
	sem := make(chan struct{}, e.workers)
	var wg sync.WaitGroup
	for k := range e.replays {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rc := cfg
			// A predictor learns as its replay goes, so each replay has its own.
			rc.Predictor = newHistoryPredictor()
			res, err := sim.RunContext(ctx, e.cluster, e.replays[k], rc)
			out.PerReplay[k], errs[k] = ValuesOf(res.Metrics), err
			if k == 0 && err == nil {
				out.Prediction = predictionAccuracy(e.replays[k], res)
			}
		}()
	}
	wg.Wait()
	e.mu.Lock()
	e.count += len(e.replays)
	e.mu.Unlock()
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// predictionAccuracy compares the run times a replay predicted with the
// jobs' run times, over the measured jobs that finished.
func predictionAccuracy(jobs []sim.Job, res sim.Result) predict.Accuracy {
	var pred, ran []float64
	for i, o := range res.Jobs {
		if o.State == sim.Done && !jobs[i].Warmup {
			pred, ran = append(pred, o.Predicted.Seconds()), append(ran, jobs[i].Duration.Seconds())
		}
	}
	return predict.Measure(pred, ran)
}

// Comparison is a candidate against a reference on the same replays.
type Comparison struct {
	Before, After Values
	// Gains are the objective's relative gains per replay (paired: each
	// replay compares both on the same arrivals).
	Gains []float64
	// Gain is their mean, StdErr its standard error and Lower the one-sided
	// 95% lower confidence bound (mean - 1.645 standard errors).
	Gain, StdErr, Lower float64
	// Wins counts replays where the candidate was better.
	Wins int
	// Changes is each metric's relative change (after - before) / before,
	// paired replay by replay, with its spread over the replays, so a
	// reader sees which changes are within noise.
	Changes map[Metric]Spread `json:",omitempty"`
}

// Spread is the mean of a change measured on several replays and the
// standard error of that mean (0 with one replay).
type Spread struct {
	Mean   float64 `json:"mean"`
	StdErr float64 `json:"stdErr"`
}

// WithinNoise reports whether the change's two-sided 95% interval
// includes no change.
func (s Spread) WithinNoise() bool { return math.Abs(s.Mean) <= 1.96*s.StdErr }

func spreadOf(v []float64) Spread {
	m, sd := meanSD(v)
	if len(v) < 2 {
		return Spread{Mean: m}
	}
	return Spread{Mean: m, StdErr: sd / math.Sqrt(float64(len(v)))}
}

// Compare pairs cand with ref replay by replay under o.
func Compare(o Objective, cand, ref Evaluation) Comparison {
	c := Comparison{Before: ref.Mean(), After: cand.Mean(), Changes: map[Metric]Spread{}}
	for k := range cand.PerReplay {
		g := o.Gain(cand.PerReplay[k], ref.PerReplay[k])
		c.Gains = append(c.Gains, g)
		if g > 0 {
			c.Wins++
		}
	}
	s := spreadOf(c.Gains)
	c.Gain, c.StdErr = s.Mean, s.StdErr
	c.Lower = c.Gain - 1.645*c.StdErr
	for _, m := range Metrics {
		ch := make([]float64, len(cand.PerReplay))
		for k := range cand.PerReplay {
			// Below its floor a metric is compared against the floor, as
			// the objective does, so 0.001 s against 0 s is no +inf%.
			b := math.Max(ref.PerReplay[k][m], floors[m])
			ch[k] = (cand.PerReplay[k][m] - ref.PerReplay[k][m]) / b
		}
		c.Changes[m] = spreadOf(ch)
	}
	return c
}

// HeldOutAfterTraining is what the held-out jobs are judged on: jobs with
// those arriving before cut (SplitByTime's training jobs) marked warm-up
// (sim.Job.Warmup: they load the cluster but are not measured), so the
// held-out jobs play at their own times after them. Replayed alone on an
// empty cluster, a held-out stretch of a contended history would start
// without the backlog it inherited, and its gains and losses would be
// those of a quiet cluster. The search never replays the held-out jobs, so
// their outcomes stay out of it; a candidate is judged by what it does to
// jobs it was not chosen on, starting from the queue its own rules built.
func HeldOutAfterTraining(jobs []sim.Job, cut time.Duration) []sim.Job {
	out := slices.Clone(jobs)
	for i := range out {
		out[i].Warmup = out[i].Arrival < cut
	}
	return out
}

// SplitByTime splits jobs (in any order) by arrival time: the earliest
// frac of them (by count, so a quiet stretch does not starve either side)
// train the search, and the jobs arriving at or after the first later
// arrival are held out, their arrivals shifted so the held-out part starts
// at 0. cut is the held-out part's start.
func SplitByTime(jobs []sim.Job, frac float64) (train, held []sim.Job, cut time.Duration) {
	if len(jobs) == 0 {
		return nil, nil, 0
	}
	sorted := append([]sim.Job(nil), jobs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Arrival < sorted[j].Arrival })
	k := min(max(int(frac*float64(len(sorted))), 0), len(sorted)-1)
	cut = sorted[k].Arrival
	for _, j := range sorted {
		if j.Arrival < cut {
			train = append(train, j)
		} else {
			j.Arrival -= cut
			held = append(held, j)
		}
	}
	return train, held, cut
}
