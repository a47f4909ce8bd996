package tuner

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
)

// PaperSource cites the published numbers FGDTable prints beside ours.
const PaperSource = `Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation ` +
	`Gradient Descent", USENIX ATC 2023; per-run results of the artifact ` +
	`(github.com/hkust-adsl/kubernetes-scheduler-simulator @8f3d641, experiments/analysis/expected_results, Apache-2.0), ` +
	`mean ± sd over its seeds (42-51), read from the artifact's analysis_allo_discrete.csv and analysis_frag_discrete.csv`

// Published is the paper's figure for one policy on one trace, over the
// artifact's seeds: the unallocated GPU share at 100% arrived demand (mean
// and standard deviation), the allocation at 130% and the fragmentation
// at 90% (means; Frag90 is NaN without fragmentation results), all in % of
// the cluster's GPUs.
type Published struct {
	Seeds                                        int
	Unallocated, UnallocatedSD, Alloc130, Frag90 float64
}

// Paper holds the artifact's results by trace and policy ("fgd",
// "bestfit", "packing", "dotprod", "random" and "clustering", which
// schedloop has no score term for).
type Paper map[string]map[string]Published

// PaperPolicies is the order the paper's table lists policies in.
var PaperPolicies = []string{"fgd", "bestfit", "packing", "clustering", "dotprod", "random"}

// paperPolicy maps the artifact's policy names ("06-FGD", "04-GpuPacking")
// to schedloop's.
func paperPolicy(name string) string {
	_, n, ok := strings.Cut(name, "-")
	if !ok {
		n = name
	}
	n = strings.ToLower(n)
	switch n {
	case "gpupacking":
		return "packing"
	case "gpuclustering":
		return "clustering"
	}
	return n
}

// PaperFromResults summarises the artifact's per-run results: allocation
// runs (analysis_allo_discrete.csv) and fragmentation runs
// (analysis_frag_discrete.csv, may be nil). Runs too short to reach 100%
// arrived demand are left out.
func PaperFromResults(allo, frag []trace.FGDResult) Paper {
	type key struct{ trace, policy string }
	unalloc, a130, f90 := map[key][]float64{}, map[key][]float64{}, map[key][]float64{}
	for _, r := range allo {
		if len(r.At) <= 100 {
			continue
		}
		k := key{r.Trace, paperPolicy(r.Policy)}
		unalloc[k] = append(unalloc[k], 100-r.At[100])
		a130[k] = append(a130[k], r.At[min(130, len(r.At)-1)])
	}
	for _, r := range frag {
		if len(r.At) > 90 {
			k := key{r.Trace, paperPolicy(r.Policy)}
			f90[k] = append(f90[k], r.At[90])
		}
	}
	p := Paper{}
	for k, u := range unalloc {
		if p[k.trace] == nil {
			p[k.trace] = map[string]Published{}
		}
		m, sd := meanSD(u)
		pub := Published{Seeds: len(u), Unallocated: m, UnallocatedSD: sd, Alloc130: mean(a130[k]), Frag90: math.NaN()}
		if len(f90[k]) > 0 {
			pub.Frag90 = mean(f90[k])
		}
		p[k.trace][k.policy] = pub
	}
	return p
}

// FGDRow is one policy on one trace over the seeds.
type FGDRow struct {
	Trace  string
	Policy scoring.Policy
	Seeds  int
	// Unallocated is 100 - allocation (% of GPUs) when arrived demand first
	// reaches 100% of capacity; Alloc130 the allocation at the end (130%);
	// Frag90 the fragmentation (% of GPUs) at 90% arrived.
	Unallocated, UnallocatedSD, Alloc130, Frag90 float64
}

// FGDExperiment runs the paper's experiment (sim.InflateFGD then sim.Fill)
// for each policy and seed on pods (one trace's pods) and the cluster c,
// using workers goroutines (0: GOMAXPROCS). progress, when set, hears
// after each run.
func FGDExperiment(ctx context.Context, c *sim.Cluster, pods []sim.Job, traceName string, policies []scoring.Policy,
	seeds []int64, workers int, progress func(done, total int)) ([]FGDRow, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	w := scoring.TypicalWorkload(sim.Requests(pods), 0.95)
	streams := make([][]sim.Job, len(seeds))
	for i, s := range seeds {
		streams[i] = sim.InflateFGD(pods, c.GPUMilli(), 1.3, s)
	}
	type run struct{ unalloc, alloc130, frag90 float64 }
	results := make([][]run, len(policies))
	for i := range results {
		results[i] = make([]run, len(seeds))
	}
	type task struct{ p, s int }
	tasks := make(chan task)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done, total := 0, len(policies)*len(seeds)
	for k := 0; k < workers; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range tasks {
				pts := sim.Fill(c, streams[t.s], policies[t.p], w, uint64(seeds[t.s]))
				results[t.p][t.s] = run{100 - sim.At(pts, 100).Allocated, pts[len(pts)-1].Allocated, sim.At(pts, 90).Fragmentation}
				mu.Lock()
				done++
				if progress != nil {
					progress(done, total)
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for p := range policies {
		for s := range seeds {
			select {
			case tasks <- task{p, s}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(tasks)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows := make([]FGDRow, len(policies))
	for p, pol := range policies {
		var u, a, f []float64
		for _, r := range results[p] {
			u, a, f = append(u, r.unalloc), append(a, r.alloc130), append(f, r.frag90)
		}
		mu, sd := meanSD(u)
		rows[p] = FGDRow{Trace: traceName, Policy: pol, Seeds: len(seeds), Unallocated: mu, UnallocatedSD: sd,
			Alloc130: mean(a), Frag90: mean(f)}
	}
	return rows, nil
}

func mean(v []float64) float64 { m, _ := meanSD(v); return m }

func meanSD(v []float64) (float64, float64) {
	if len(v) == 0 {
		return 0, 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	m := s / float64(len(v))
	if len(v) < 2 {
		return m, 0
	}
	var ss float64
	for _, x := range v {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(v)-1))
}

// FGDTolerance is how far (percentage points of the cluster's GPUs) our
// unallocated share may sit from the paper's before a trace's verdict says
// so: a point, or three of the paper's standard deviations when wider.
func FGDTolerance(p Published) float64 { return math.Max(1, 3*p.UnallocatedSD) }

// FGDVerdict judges one trace: whether FGD left the fewest GPUs unallocated
// among our policies, as the paper found on every trace, and which of our
// figures sit outside FGDTolerance of the paper's.
func FGDVerdict(rows []FGDRow, paper map[string]Published) string {
	var fgd *FGDRow
	best := rows[0]
	for i, r := range rows {
		if r.Policy == scoring.PolicyFGD {
			fgd = &rows[i]
		}
		if r.Unallocated < best.Unallocated {
			best = r
		}
	}
	var parts []string
	switch {
	case fgd == nil:
		parts = append(parts, "FGD not run")
	case best.Policy != scoring.PolicyFGD && best.Unallocated < fgd.Unallocated:
		parts = append(parts, fmt.Sprintf("NOT as the paper: %s left fewer GPUs unallocated than FGD (%.2f < %.2f)",
			best.Policy, best.Unallocated, fgd.Unallocated))
	default:
		parts = append(parts, "FGD best, as in the paper")
	}
	if len(paper) == 0 {
		return strings.Join(append(parts, "no published result for this list"), "; ")
	}
	var off []string
	for _, r := range rows {
		p, ok := paper[string(r.Policy)]
		if !ok {
			continue
		}
		if d := r.Unallocated - p.Unallocated; math.Abs(d) > FGDTolerance(p) {
			off = append(off, fmt.Sprintf("%s %+.2f", r.Policy, d))
		}
	}
	if len(off) == 0 {
		parts = append(parts, "every policy within tolerance of the paper")
	} else {
		parts = append(parts, "off the paper by more than the tolerance: "+strings.Join(off, ", "))
	}
	return strings.Join(parts, "; ")
}

// WriteFGDTable prints our rows beside the paper's figures (paper may be
// nil: the artifact's results were not found), a verdict per trace, and the
// paper's own table.
func WriteFGDTable(w io.Writer, rows []FGDRow, paper Paper) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "trace\tpolicy\tseeds\tunalloc@100% ours\tpaper\tdiff\talloc@130% ours\tpaper\tfrag@90% ours\tpaper\t")
	var order []string
	byTrace := map[string][]FGDRow{}
	for _, r := range rows {
		if _, seen := byTrace[r.Trace]; !seen {
			order = append(order, r.Trace)
		}
		byTrace[r.Trace] = append(byTrace[r.Trace], r)
		p, ok := paper[r.Trace][string(r.Policy)]
		pu, diff, a130, f90 := "-", "-", "-", "-"
		if ok {
			pu = fmt.Sprintf("%.2f ± %.2f", p.Unallocated, p.UnallocatedSD)
			diff = fmt.Sprintf("%+.2f", r.Unallocated-p.Unallocated)
			a130 = fmt.Sprintf("%.2f", p.Alloc130)
			if !math.IsNaN(p.Frag90) {
				f90 = fmt.Sprintf("%.2f", p.Frag90)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f ± %.2f\t%s\t%s\t%.2f\t%s\t%.2f\t%s\t\n", r.Trace, r.Policy, r.Seeds,
			r.Unallocated, r.UnallocatedSD, pu, diff, r.Alloc130, a130, r.Frag90, f90)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nverdict per trace (tolerance: 1 point or 3 of the paper's standard deviations, whichever is wider):")
	for _, t := range order {
		fmt.Fprintf(w, "  %-12s %s\n", t, FGDVerdict(byTrace[t], paper[t]))
	}
	if len(paper) > 0 {
		fmt.Fprintln(w, "\nthe paper's table: unallocated GPUs (% of capacity) at 100% arrived demand, mean ± sd over its seeds:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "trace\t")
		for _, p := range PaperPolicies {
			fmt.Fprintf(tw, "%s\t", p)
		}
		fmt.Fprintln(tw)
		for _, t := range slices.Sorted(maps.Keys(paper)) {
			fmt.Fprintf(tw, "%s\t", t)
			for _, p := range PaperPolicies {
				if v, ok := paper[t][p]; ok {
					fmt.Fprintf(tw, "%.2f ± %.2f\t", v.Unallocated, v.UnallocatedSD)
				} else {
					fmt.Fprint(tw, "-\t")
				}
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "\nunalloc@100%%: GPUs not allocated (%% of capacity) when arrived demand reaches 100%%; lower is better.\n"+
		"Paper figures: %s.\nNot reproduced: the paper's GPU Clustering baseline (no schedloop score term).\n", PaperSource)
	return err
}
