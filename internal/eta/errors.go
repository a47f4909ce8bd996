package eta

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
)

// ErrorModel is the predictor's measured error: the ratios of actual to
// predicted run time of finished jobs, sorted. The zero value has none.
type ErrorModel struct {
	ratios []float64
}

// MinErrorSamples is how many finished jobs a measured model needs; with
// fewer, DefaultErrors is used.
const MinErrorSamples = 20

// NewErrorModel measures the error from finished jobs' predicted and
// actual run times (pairs with a non-positive value are skipped). With
// fewer than MinErrorSamples pairs it is DefaultErrors.
func NewErrorModel(predicted, actual []time.Duration) (ErrorModel, error) {
	if len(predicted) != len(actual) {
		return ErrorModel{}, fmt.Errorf("error model: %d predictions for %d run times", len(predicted), len(actual))
	}
	var m ErrorModel
	for i := range predicted {
		if predicted[i] > 0 && actual[i] > 0 {
			m.ratios = append(m.ratios, float64(actual[i])/float64(predicted[i]))
		}
	}
	if len(m.ratios) < MinErrorSamples {
		return DefaultErrors(), nil
	}
	slices.Sort(m.ratios)
	return m, nil
}

// DefaultErrors is the error assumed with no history: a log-normal ratio
// with median 1 and log-standard deviation 1, i.e. a job is as likely to
// run 2.7x longer than predicted as 2.7x shorter one time in three, the
// spread measured run-time predictors reach on production traces (Philly,
// Helios) at best; wider would make every interval useless, narrower would
// claim knowledge a cluster without history does not have.
func DefaultErrors() ErrorModel {
	const n = 199
	m := ErrorModel{ratios: make([]float64, n)}
	for i := range m.ratios {
		m.ratios[i] = math.Exp(normalQuantile((float64(i) + 0.5) / n))
	}
	return m
}

func (m ErrorModel) empty() bool { return len(m.ratios) == 0 }

// Len is how many ratios the model holds.
func (m ErrorModel) Len() int { return len(m.ratios) }

// Quantile is the ratio at probability u in (0,1), interpolated between
// the measured ones.
func (m ErrorModel) Quantile(u float64) float64 {
	n := len(m.ratios)
	x := u*float64(n) - 0.5
	switch {
	case x <= 0:
		return m.ratios[0]
	case x >= float64(n-1):
		return m.ratios[n-1]
	}
	k := int(x)
	f := x - float64(k)
	return m.ratios[k]*(1-f) + m.ratios[k+1]*f
}

// CDF is the share of measured ratios at or below x, the inverse of
// Quantile: 1 past the largest.
func (m ErrorModel) CDF(x float64) float64 {
	n := len(m.ratios)
	k, _ := slices.BinarySearch(m.ratios, x)
	if k >= n {
		return 1
	}
	if k == 0 {
		if x <= m.ratios[0] {
			return 0
		}
	}
	// Invert Quantile's interpolation between ratios k-1 and k.
	lo, hi := m.ratios[k-1], m.ratios[k]
	f := 0.0
	if hi > lo {
		f = (x - lo) / (hi - lo)
	}
	return (float64(k-1) + f + 0.5) / float64(n)
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
