package eta

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
)

// ErrorModel is the predictor's measured error: the distribution of the
// ratio of a job's actual to its predicted run time and, for jobs that
// have outlived their prediction, of run times themselves. The zero value
// has no points.
type ErrorModel struct {
	// ratio and runTime (seconds; empty for DefaultErrors) are what a
	// job's ratio and run time are drawn from: each the long-run
	// distribution mixed with that of the jobs that started last
	// (recentMixture).
	ratio   survival
	runTime survival
	// shift is the standard error of the mean log ratio: how far the
	// whole measured distribution may be off, for every job at once.
	shift float64
}

// Observation is one job the error is measured on: its predicted run time
// and how long it ran, to its end when Finished, so far when still running.
// Began is when it started, on any clock shared by the observations (the
// snapshot's, negative, say): the jobs that started last are the ones the
// next are most alike (recentMixture). Observations that all begin at zero
// are taken as started in the order given.
type Observation struct {
	Predicted, Ran time.Duration
	Finished       bool
	Began          time.Duration
}

// MinErrorSamples is how many finished jobs a measured model needs; with
// fewer, DefaultErrors is used.
const MinErrorSamples = 20

// NewErrorModel measures the error from jobs that finished and jobs still
// running (observations with a non-positive time are skipped), by the
// Kaplan-Meier estimator: a running job counts as "more than its ratio so
// far". Leaving running jobs out would measure only the jobs short enough
// to have finished, and estimate every wait too short: at any instant the
// long jobs are the ones still running. With fewer than MinErrorSamples
// finished jobs it is DefaultErrors. obs are in the order the jobs finished
// (running ones anywhere): the shared factor's spread is the larger of that
// between consecutive blocks of them and that between blocks of the jobs
// consecutive by start (Began), whose last block the draws lean on
// (recentMixture): how far the jobs to come may be from it.
func NewErrorModel(obs []Observation) ErrorModel {
	ratios := make([]observed, 0, len(obs))
	runTimes := make([]observed, 0, len(obs))
	valid := make([]Observation, 0, len(obs))
	finished := 0
	var sum, sumSq float64
	var logs []float64
	for _, o := range obs {
		if o.Predicted <= 0 || o.Ran <= 0 {
			continue
		}
		valid = append(valid, o)
		r := float64(o.Ran) / float64(o.Predicted)
		ratios = append(ratios, observed{r, o.Finished})
		runTimes = append(runTimes, observed{o.Ran.Seconds(), o.Finished})
		if o.Finished {
			finished++
			l := math.Log(r)
			sum, sumSq = sum+l, sumSq+l*l
			logs = append(logs, l)
		}
	}
	if finished < MinErrorSamples {
		return DefaultErrors()
	}
	mean := sum / float64(finished)
	variance := math.Max(sumSq/float64(finished)-mean*mean, 0)
	byStart := startOrder(valid)
	ratioSeq := make([]observed, len(byStart))
	runSeq := make([]observed, len(byStart))
	for i, o := range byStart {
		ratioSeq[i] = observed{float64(o.Ran) / float64(o.Predicted), o.Finished}
		runSeq[i] = observed{o.Ran.Seconds(), o.Finished}
	}
	ratio, spread := recentMixture(kaplanMeier(ratios), ratioSeq)
	runTime, _ := recentMixture(kaplanMeier(runTimes), runSeq)
	return ErrorModel{ratio: ratio, runTime: runTime,
		shift: math.Max(math.Sqrt(variance/float64(finished)), math.Max(blockSpread(logs), spread))}
}

// startOrder is obs sorted by Began, ties in the order given (a stable
// sort at pdqsort's cost: this runs before every live estimate).
func startOrder(obs []Observation) []Observation {
	order := make([]int, len(obs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Or(cmp.Compare(obs[a].Began, obs[b].Began), cmp.Compare(a, b)) })
	sorted := make([]Observation, len(obs))
	for i, k := range order {
		sorted[i] = obs[k]
	}
	return sorted
}

// errorBlock is how many consecutive jobs one block of blockSpread holds,
// and how many of the last to start recentMixture draws from: about a
// team's batch of similar jobs.
const errorBlock = 32

// recentMixture is the distribution a job's ratio (or, once it has
// outlived its prediction, its run time) is drawn from; longRun is
// measured over seq, the jobs in the order they started. Errors persist (a
// team's sweep submitted at once, a slow dataset, a predictor that lags a
// change), so the next jobs are like the jobs that started last more than
// like the long run. It mixes the two (recentCohort for the recent jobs),
// the recent jobs weighted by how much of the spread between blocks of
// errorBlock jobs consecutive by start is persistence rather than the noise
// of averaging independent errors (an empirical-Bayes weight: a cluster
// whose errors do not persist draws from its long run alone).
//
// The jobs are taken in the order they started, not finished: the last to
// finish are the short ones (the long ones of the same batch still run), and
// a batch of long jobs is seen only once it is over, when the jobs queued
// behind it have already been estimated too short. For the weight, a job
// still running counts as the mean log the long run gives jobs that ran at
// least as long: one that just started says nothing yet, one far past its
// prediction says its batch runs long. The rule has no constants besides
// errorBlock and the resolution its distributions are read at; nothing in
// it is fitted to a trace.
func recentMixture(longRun survival, seq []observed) (survival, float64) {
	if len(seq) < 4*errorBlock {
		return longRun, 0
	}
	logs := make([]float64, len(seq))
	var sum, sumSq float64
	for i, o := range seq {
		if o.finished {
			logs[i] = math.Log(o.value)
		} else {
			logs[i] = longRun.meanLogAbove(o.value)
		}
		sum, sumSq = sum+logs[i], sumSq+logs[i]*logs[i]
	}
	n := float64(len(logs))
	mean := sum / n
	variance := math.Max(sumSq/n-mean*mean, 0)
	spread := blockSpread(logs)
	if spread == 0 {
		return longRun, 0
	}
	w := math.Max(0, 1-variance/errorBlock/(spread*spread))
	if w == 0 {
		return longRun, spread
	}
	// The mixture as weighted points: the long run at its quantiles, the
	// recent jobs by their own distribution (recentCohort).
	var pts []weighted
	for k := 0; k < mixturePoints; k++ {
		pts = append(pts, weighted{longRun.quantile((float64(k) + 0.5) / mixturePoints), (1 - w) / mixturePoints})
	}
	pts = append(pts, recentCohort(longRun, seq, w)...)
	return fromPoints(pts), spread
}

// recentCohort is the distribution of the jobs that started since the
// errorBlock-th last of those that finished, as weighted points summing to
// share: the Kaplan-Meier estimate over them (a job still running counts
// as "beyond its ratio so far", so the many that just started leave it
// unchanged rather than pulling it to the long run), and the share the
// estimate leaves beyond its last end spread over the jobs still running
// past it, each by the long run's distribution given its ratio so far.
// The cohort is chosen by when its jobs started, not by how they ended:
// the last jobs to finish alone would be the short ones.
func recentCohort(longRun survival, seq []observed, share float64) []weighted {
	from, ended := len(seq), 0
	for from > 0 && ended < errorBlock {
		from--
		if seq[from].finished {
			ended++
		}
	}
	cohort := slices.Clone(seq[from:])
	km := kaplanMeier(cohort)
	var pts []weighted
	prev := 0.0
	for i, v := range km.values {
		pts = append(pts, weighted{v, share * (km.shares[i] - prev)})
		prev = km.shares[i]
	}
	last := km.values[len(km.values)-1]
	var beyond []float64
	for _, c := range cohort {
		if !c.finished && c.value > last {
			beyond = append(beyond, c.value)
		}
	}
	if left := share * (1 - prev); left > 0 && len(beyond) > 0 {
		each := left / float64(len(beyond)) / conditionalPoints
		for _, c := range beyond {
			for k := 0; k < conditionalPoints; k++ {
				pts = append(pts, weighted{longRun.conditional(c, (float64(k)+0.5)/conditionalPoints), each})
			}
		}
	}
	return pts
}

// mixturePoints and conditionalPoints are how finely recentMixture reads
// the long run and a running job's conditional distribution: finer than
// the stratified draws of any estimate (DefaultRuns).
const (
	mixturePoints     = 200
	conditionalPoints = 16
)

type weighted struct{ value, weight float64 }

// fromPoints is the distribution of weighted points (weights summing to
// one), each point's share at the middle of its weight, as DefaultErrors'
// are; past the last point it falls off as the 1/value tail.
func fromPoints(pts []weighted) survival {
	slices.SortFunc(pts, func(a, b weighted) int { return cmp.Compare(a.value, b.value) })
	d := survival{values: make([]float64, 0, len(pts)), shares: make([]float64, 0, len(pts))}
	cum := 0.0
	for _, p := range pts {
		share := cum + p.weight/2
		cum += p.weight
		if n := len(d.values); n > 0 && d.values[n-1] == p.value {
			d.shares[n-1] = share
			continue
		}
		d.values, d.shares = append(d.values, p.value), append(d.shares, share)
	}
	d.tailFrom = d.values[len(d.values)-1]
	return d
}

// blockSpread is the standard deviation of the mean log ratio between
// blocks of consecutive jobs: jobs finishing together share much of their
// error (one team's batch, one dataset, one bug), so the error a whole
// wait shares is this, not the standard error of all jobs' mean, which
// shrinks with history however correlated the errors are. Zero with fewer
// than four blocks.
func blockSpread(logs []float64) float64 {
	blocks := len(logs) / errorBlock
	if blocks < 4 {
		return 0
	}
	var sum, sumSq float64
	for b := 0; b < blocks; b++ {
		m := 0.0
		for _, l := range logs[b*errorBlock : (b+1)*errorBlock] {
			m += l
		}
		m /= errorBlock
		sum, sumSq = sum+m, sumSq+m*m
	}
	mean := sum / float64(blocks)
	return math.Sqrt(math.Max(sumSq/float64(blocks)-mean*mean, 0))
}

// DefaultErrors is the error assumed with no history: a log-normal ratio
// with median 1 and log-standard deviation 1, i.e. a job is as likely to
// run 2.7x longer than predicted as 2.7x shorter one time in three, the
// spread measured run-time predictors reach on production traces (Philly,
// Helios) at best; wider would make every interval useless, narrower would
// claim knowledge a cluster without history does not have. It is as
// uncertain as a measurement from MinErrorSamples jobs.
func DefaultErrors() ErrorModel {
	const n = 199
	d := survival{values: make([]float64, n), shares: make([]float64, n)}
	for i := range d.values {
		d.shares[i] = (float64(i) + 0.5) / n
		d.values[i] = math.Exp(normalQuantile(d.shares[i]))
	}
	d.tailFrom = d.values[n-1]
	return ErrorModel{ratio: d, shift: 1 / math.Sqrt(MinErrorSamples)}
}

func (m ErrorModel) empty() bool { return m.ratio.empty() }

// Len is how many points the ratio's distribution holds.
func (m ErrorModel) Len() int { return len(m.ratio.values) }

// Quantile is the ratio at probability u in (0,1) (survival.quantile).
func (m ErrorModel) Quantile(u float64) float64 { return m.ratio.quantile(u) }

// CDF is the share of jobs whose ratio is at or below x.
func (m ErrorModel) CDF(x float64) float64 { return m.ratio.cdf(x) }

// sharedFactor is one run's factor on every job's run time, at
// probability u: the measured distribution is itself an estimate from a
// sample, and its error is shared by every job of a run, so it cannot
// average out over the many jobs a long wait sums (leaving it out made a
// backtest's intervals far too narrow).
func (m ErrorModel) sharedFactor(u float64) float64 {
	if m.shift == 0 {
		return 1
	}
	return math.Exp(m.shift * normalQuantile(u))
}

type observed struct {
	value    float64
	finished bool
}

// survival is a distribution measured with censoring: points (value,
// share of jobs at or below it) interpolated linearly, and, when censored
// observations outlasted every finished one, a tail past the last point
// that starts at the largest censored value and falls off as 1/value (a
// job at value v is as likely to end before 2v as after).
type survival struct {
	values, shares []float64
	tailFrom       float64
}

// kaplanMeier estimates the distribution of obs, a censored observation
// counting as "more than its value".
func kaplanMeier(obs []observed) survival {
	// At equal values the ends come before the censorings, as the
	// estimator's convention has it.
	slices.SortFunc(obs, func(a, b observed) int {
		if c := cmp.Compare(a.value, b.value); c != 0 {
			return c
		}
		return cmp.Compare(boolRank(a.finished), boolRank(b.finished))
	})
	d := survival{tailFrom: obs[len(obs)-1].value}
	survive, atRisk := 1.0, len(obs)
	for i := 0; i < len(obs); {
		k, ends := i, 0
		for ; k < len(obs) && obs[k].value == obs[i].value; k++ {
			if obs[k].finished {
				ends++
			}
		}
		if ends > 0 {
			survive *= 1 - float64(ends)/float64(atRisk)
			d.values, d.shares = append(d.values, obs[i].value), append(d.shares, 1-survive)
		}
		atRisk -= k - i
		i = k
	}
	return d
}

func boolRank(finished bool) int {
	if finished {
		return 0
	}
	return 1
}

func (d survival) empty() bool { return len(d.values) == 0 }

// tail is the share of jobs beyond the last point.
func (d survival) tail() float64 { return 1 - d.shares[len(d.shares)-1] }

// quantile is the value at probability u in (0,1).
func (d survival) quantile(u float64) float64 {
	n := len(d.values)
	if u <= d.shares[0] {
		return d.values[0]
	}
	if last := d.shares[n-1]; u >= last {
		if tail := d.tail(); tail > 1e-12 && u < 1 {
			return d.tailFrom * tail / (1 - u)
		}
		return d.values[n-1]
	}
	k, _ := slices.BinarySearch(d.shares, u)
	lo, hi := d.shares[k-1], d.shares[k]
	if hi == lo {
		return d.values[k]
	}
	f := (u - lo) / (hi - lo)
	return d.values[k-1]*(1-f) + d.values[k]*f
}

// cdf is the share at or below x, quantile's inverse.
func (d survival) cdf(x float64) float64 {
	n := len(d.values)
	if x <= d.values[0] {
		if x < d.values[0] {
			return 0
		}
		return d.shares[0]
	}
	if x >= d.values[n-1] {
		if tail := d.tail(); tail > 1e-12 {
			return 1 - tail*min(d.tailFrom/x, 1)
		}
		return 1
	}
	k, _ := slices.BinarySearch(d.values, x)
	lo, hi := d.values[k-1], d.values[k]
	f := 0.0
	if hi > lo {
		f = (x - lo) / (hi - lo)
	}
	return d.shares[k-1]*(1-f) + d.shares[k]*f
}

// conditional draws from d given the value exceeds above, at probability
// u; past every value measured, by the 1/value tail from above itself.
func (d survival) conditional(above, u float64) float64 {
	lo := d.cdf(above)
	if lo >= 1 {
		// u/(1-u) has median 1: as likely to end before twice its age as
		// after.
		return above * (1 + u/(1-u+1e-9))
	}
	return math.Max(d.quantile(lo+u*(1-lo)), above)
}

// meanLogAbove is the mean log of d's values beyond above: what a job
// known to exceed above is expected to reach, on the log scale; past every
// value measured, by the 1/value tail from above (whose mean log is one
// more than above's).
func (d survival) meanLogAbove(above float64) float64 {
	if d.cdf(above) >= 1 {
		return math.Log(above) + 1
	}
	m := 0.0
	for k := 0; k < conditionalPoints; k++ {
		m += math.Log(d.conditional(above, (float64(k)+0.5)/conditionalPoints))
	}
	return m / conditionalPoints
}

// normalQuantile is the standard normal's inverse CDF (Acklam's rational
// approximation, relative error below 1.2e-9).
func normalQuantile(p float64) float64 {
	a := [...]float64{-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00}
	b := [...]float64{-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01, -1.328068155288572e+01}
	c := [...]float64{-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00}
	d := [...]float64{7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00}
	const low = 0.02425
	switch {
	case p < low:
		q := math.Sqrt(-2 * math.Log(p))
		return (((((c[0]*q+c[1])*q+c[2])*q+c[3])*q+c[4])*q + c[5]) / ((((d[0]*q+d[1])*q+d[2])*q+d[3])*q + 1)
	case p > 1-low:
		q := math.Sqrt(-2 * math.Log(1-p))
		return -(((((c[0]*q+c[1])*q+c[2])*q+c[3])*q+c[4])*q + c[5]) / ((((d[0]*q+d[1])*q+d[2])*q+d[3])*q + 1)
	}
	q := p - 0.5
	r := q * q
	return (((((a[0]*r+a[1])*r+a[2])*r+a[3])*r+a[4])*r + a[5]) * q / (((((b[0]*r+b[1])*r+b[2])*r+b[3])*r+b[4])*r + 1)
}

// neverFitsReason says why a job can never start: its members do not fit
// the empty cluster, or its demand is over its queue's limit.
func neverFitsReason(snap Snapshot, j *sim.Job) string {
	pods := 0
	for _, n := range snap.Cluster.Nodes {
		pods += scoring.Capacity(n.Empty(), j.Request)
	}
	if pods < j.Members {
		what := fmt.Sprintf("%d GPUs", j.Request.GPUs)
		if j.Request.Shared() {
			what = fmt.Sprintf("%d milli-GPU", j.Request.GPUMilli)
		}
		if len(j.Request.GPUModels) > 0 {
			what += fmt.Sprintf(" of model %v", j.Request.GPUModels)
		}
		return fmt.Sprintf("needs %d pods of %s, %d CPU milli, %d MiB each; the empty cluster holds %d", j.Members, what, j.Request.CPUMilli, j.Request.MemoryMiB, pods)
	}
	limit := snap.Config.Limit(j.Queue)
	switch scoring.QueueCheck(limit, scoring.QueueUsage{}, j.DemandMilli(), j.Members > 1) {
	case scoring.QueueAtGPULimit:
		return fmt.Sprintf("needs %.3g GPUs; queue %s may hold at most %d", float64(j.DemandMilli())/scoring.MilliPerGPU, j.Queue, limit.MaxGPUs)
	case scoring.QueueAtGangLimit:
		return fmt.Sprintf("queue %s admits no gang (max running gangs %d)", j.Queue, limit.MaxRunningGangs)
	}
	return "the simulator found no way to start it"
}
