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
// ratio of a job's actual to its predicted run time, as points (ratio, share
// of jobs at or below it) interpolated linearly, and, when jobs still
// running have outlasted every finished one, a tail past the last point.
// The zero value has no points.
type ErrorModel struct {
	ratios, shares []float64
	// tailFrom is the largest ratio a running job has reached: no job
	// beyond the last point is known to have ended before it.
	tailFrom float64
	// shift is the standard error of the mean log ratio: how far the
	// whole measured distribution may be off, for every job at once.
	shift float64
}

// sharedFactor is one run's factor on every job's run time, at
// probability u: the measured distribution is itself an estimate from a
// sample, and its error is shared by every job of a run, so it cannot
// average out over the many jobs a long wait sums (leaving it out makes
// intervals far too narrow: a backtest's coverage fell from 0.8 to near
// 0.5).
func (m ErrorModel) sharedFactor(u float64) float64 {
	if m.shift == 0 {
		return 1
	}
	return math.Exp(m.shift * normalQuantile(u))
}

// Observation is one job the error is measured on: its predicted run time
// and how long it ran, to its end when Finished, so far when still running.
type Observation struct {
	Predicted, Ran time.Duration
	Finished       bool
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
// finished jobs it is DefaultErrors.
func NewErrorModel(obs []Observation) ErrorModel {
	type point struct {
		ratio    float64
		finished bool
	}
	pts := make([]point, 0, len(obs))
	finished := 0
	for _, o := range obs {
		if o.Predicted > 0 && o.Ran > 0 {
			pts = append(pts, point{float64(o.Ran) / float64(o.Predicted), o.Finished})
			if o.Finished {
				finished++
			}
		}
	}
	if finished < MinErrorSamples {
		return DefaultErrors()
	}
	// At equal ratios the ends come before the censorings, as the
	// estimator's convention has it.
	slices.SortFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.ratio, b.ratio); c != 0 {
			return c
		}
		return cmp.Compare(boolRank(a.finished), boolRank(b.finished))
	})
	m := ErrorModel{tailFrom: pts[len(pts)-1].ratio}
	var sum, sumSq float64
	for _, p := range pts {
		if p.finished {
			l := math.Log(p.ratio)
			sum, sumSq = sum+l, sumSq+l*l
		}
	}
	mean := sum / float64(finished)
	m.shift = math.Sqrt(math.Max(sumSq/float64(finished)-mean*mean, 0) / float64(finished))
	survive, atRisk := 1.0, len(pts)
	for i := 0; i < len(pts); {
		k, ends := i, 0
		for ; k < len(pts) && pts[k].ratio == pts[i].ratio; k++ {
			if pts[k].finished {
				ends++
			}
		}
		if ends > 0 {
			survive *= 1 - float64(ends)/float64(atRisk)
			m.ratios, m.shares = append(m.ratios, pts[i].ratio), append(m.shares, 1-survive)
		}
		atRisk -= k - i
		i = k
	}
	return m
}

func boolRank(finished bool) int {
	if finished {
		return 0
	}
	return 1
}

// DefaultErrors is the error assumed with no history: a log-normal ratio
// with median 1 and log-standard deviation 1, i.e. a job is as likely to
// run 2.7x longer than predicted as 2.7x shorter one time in three, the
// spread measured run-time predictors reach on production traces (Philly,
// Helios) at best; wider would make every interval useless, narrower would
// claim knowledge a cluster without history does not have.
func DefaultErrors() ErrorModel {
	const n = 199
	m := ErrorModel{ratios: make([]float64, n), shares: make([]float64, n)}
	for i := range m.ratios {
		m.shares[i] = (float64(i) + 0.5) / n
		m.ratios[i] = math.Exp(normalQuantile(m.shares[i]))
	}
	m.tailFrom = m.ratios[n-1]
	// As uncertain as a measurement from MinErrorSamples jobs.
	m.shift = 1 / math.Sqrt(MinErrorSamples)
	return m
}

func (m ErrorModel) empty() bool { return len(m.ratios) == 0 }

// Len is how many points the model holds.
func (m ErrorModel) Len() int { return len(m.ratios) }

// tail is the share of jobs beyond the last point: running jobs that
// outlasted every finished one.
func (m ErrorModel) tail() float64 { return 1 - m.shares[len(m.shares)-1] }

// Quantile is the ratio at probability u in (0,1). Past the last point,
// where only running jobs are, the tail starts at the largest ratio they
// reached and falls off as 1/ratio (a job that has run r times its
// prediction is as likely to end before 2r as after); with no tail the
// last ratio is the largest.
func (m ErrorModel) Quantile(u float64) float64 {
	n := len(m.ratios)
	if u <= m.shares[0] {
		return m.ratios[0]
	}
	if last := m.shares[n-1]; u >= last {
		if tail := m.tail(); tail > 1e-12 && u < 1 {
			return m.tailFrom * tail / (1 - u)
		}
		return m.ratios[n-1]
	}
	k, _ := slices.BinarySearch(m.shares, u)
	lo, hi := m.shares[k-1], m.shares[k]
	if hi == lo {
		return m.ratios[k]
	}
	f := (u - lo) / (hi - lo)
	return m.ratios[k-1]*(1-f) + m.ratios[k]*f
}

// CDF is the share of jobs whose ratio is at or below x, Quantile's
// inverse.
func (m ErrorModel) CDF(x float64) float64 {
	n := len(m.ratios)
	if x <= m.ratios[0] {
		if x < m.ratios[0] {
			return 0
		}
		return m.shares[0]
	}
	if x >= m.ratios[n-1] {
		if tail := m.tail(); tail > 1e-12 {
			return 1 - tail*min(m.tailFrom/x, 1)
		}
		return 1
	}
	k, _ := slices.BinarySearch(m.ratios, x)
	lo, hi := m.ratios[k-1], m.ratios[k]
	f := 0.0
	if hi > lo {
		f = (x - lo) / (hi - lo)
	}
	return m.shares[k-1]*(1-f) + m.shares[k]*f
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
		empty := scoring.NewNode(n.Name, n.GPUModel, n.GPUCap(), n.CPUMilliCap, n.MemoryMiBCap)
		pods += scoring.Capacity(empty, j.Request)
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
