package trace

import (
	"io"
	"strconv"
	"strings"
)

// FGDResult is one run of the FGD paper's artifact
// (experiments/analysis/expected_results/analysis_*_discrete.csv): a
// policy on one openb pod list with one shuffle seed, and the run's figure
// (GPU allocation or fragmentation, % of the cluster's GPUs) at each
// arrived demand of 0, 1, 2, ... % of capacity.
type FGDResult struct {
	// Trace is the pod list's name without "openb_pod_list_" (default,
	// multigpu20, ...).
	Trace string
	// Policy is the artifact's name, such as "06-FGD" or "05-BestFit".
	Policy string
	Seed   int64
	// At[i] is the figure when arrived demand was i% of capacity.
	At []float64
}

// MaxFGDArrived bounds the arrived-demand columns an artifact file may
// have (the paper's runs stop at 130%).
const MaxFGDArrived = 1000

// ReadFGDResults reads an artifact results file: a header of
// workload,sc_policy,tune,seed[,total_gpus],0,1,...,N and one row per run.
// The numbered columns must run from 0 without gaps; empty cells are
// refused, since a missing point would read as 0% allocated.
func ReadFGDResults(r io.Reader) ([]FGDResult, error) {
	t, err := newTable(r, "workload", "sc_policy", "seed", "0")
	if err != nil {
		return nil, err
	}
	n := 0
	for ; n <= MaxFGDArrived && t.has(strconv.Itoa(n)); n++ {
	}
	var out []FGDResult
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		res := FGDResult{Trace: strings.TrimPrefix(t.str("workload"), "openb_pod_list_"), Policy: t.str("sc_policy")}
		switch {
		case res.Trace == "":
			return nil, t.errf("workload", "empty")
		case res.Policy == "":
			return nil, t.errf("sc_policy", "empty")
		}
		if res.Seed, err = t.int64("seed", -1); err != nil {
			return nil, err
		}
		if res.Seed < 0 {
			return nil, t.errf("seed", "empty")
		}
		res.At = make([]float64, n)
		for i := range res.At {
			col := strconv.Itoa(i)
			if t.str(col) == "" {
				return nil, t.errf(col, "empty")
			}
			if res.At[i], err = t.float(col, 0); err != nil {
				return nil, err
			}
		}
		out = append(out, res)
	}
}
