package predict

import (
	"cmp"
	"math"
	"slices"
)

// Accuracy is how well predictions matched what happened.
type Accuracy struct {
	Jobs int `json:"jobs"`
	// Spearman is the rank correlation of predicted and actual run times
	// (1: the order is exactly right): what shortest-service ordering needs.
	Spearman float64 `json:"spearman"`
	// Within2x is the share of jobs predicted within a factor of two of
	// their actual run time: what reservations need.
	Within2x float64 `json:"within_2x"`
}

// Measure compares predicted with actual run times (seconds, same order).
// Run times under one second count as one second, the resolution of the
// traces and of the scheduler's clock.
func Measure(predicted, actual []float64) Accuracy {
	n := min(len(predicted), len(actual))
	a := Accuracy{Jobs: n}
	if n == 0 {
		return a
	}
	within := 0
	for i := 0; i < n; i++ {
		p, x := math.Max(predicted[i], 1), math.Max(actual[i], 1)
		if p <= 2*x && x <= 2*p {
			within++
		}
	}
	a.Within2x = float64(within) / float64(n)
	a.Spearman = pearson(ranks(predicted[:n]), ranks(actual[:n]))
	return a
}

// ranks gives each value its rank, ties the mean of the ranks they span.
func ranks(v []float64) []float64 {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(v[a], v[b]) })
	r := make([]float64, len(v))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && v[idx[j+1]] == v[idx[i]] {
			j++
		}
		mid := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			r[idx[k]] = mid
		}
		i = j + 1
	}
	return r
}

func pearson(x, y []float64) float64 {
	n := float64(len(x))
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx, my = mx/n, my/n
	var sxy, sxx, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return 0
	}
	return sxy / math.Sqrt(sxx*syy)
}
