package tuner

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
)

// The Helios queueing experiment on Philly (Hu et al., SC'21; artifact
// S-Lab-System-Group/HeliosArtifact, "QSSF Service"), as
// ../shared/traces/helios-philly-results/SOURCE.md defines it: the GPU jobs
// submitted 2017-10-01 00:00 .. 2017-11-30 23:59 of the VCs it simulates,
// each VC on its own 8-GPU nodes, consolidate placement (a job of up to 8
// GPUs on one node, best fit; a larger one on whole nodes), FIFO and SJF
// stopping at the first job that does not fit.

// HeliosSource cites the published numbers HeliosTable prints beside ours.
const HeliosSource = `Hu et al., "Characterization and Prediction of Deep Learning Workloads in Large-Scale GPU ` +
	`Datacenters", SC'21; HeliosArtifact @bdaae10, framework/QSSF Service (MIT), jct_avg/que_avg_consolidate`

// HeliosPublished is the artifact's result for all jobs, in seconds.
var HeliosPublished = map[string][2]float64{ // policy -> {average JCT, average queueing delay}
	"fifo": {86072, 56531}, "sjf": {34272, 4731}, "srtf": {30683, 1138}, "qssf": {37324, 7783},
}

// Helios's window and GPUs per node.
var (
	HeliosWindowStart = time.Date(2017, 10, 1, 0, 0, 0, 0, time.UTC)
	HeliosWindowEnd   = time.Date(2017, 11, 30, 23, 59, 59, 0, time.UTC)
)

const heliosGPUsPerNode = 8

// ReadHeliosVCs reads philly_vc.csv (vc,node num): the VCs simulated and
// their node counts, in file order.
func ReadHeliosVCs(r io.Reader) ([]HeliosVC, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("philly_vc.csv: %w", err)
	}
	if len(rows) == 0 || len(rows[0]) != 2 || strings.TrimSpace(rows[0][0]) != "vc" || strings.TrimSpace(rows[0][1]) != "node num" {
		return nil, fmt.Errorf("philly_vc.csv: header %q: want \"vc,node num\"", rows)
	}
	var out []HeliosVC
	seen := map[string]bool{}
	for i, row := range rows[1:] {
		name := strings.TrimSpace(row[0])
		n, err := strconv.Atoi(strings.TrimSpace(row[1]))
		switch {
		case name == "":
			return nil, fmt.Errorf("philly_vc.csv row %d: field vc: empty", i+2)
		case seen[name]:
			return nil, fmt.Errorf("philly_vc.csv row %d: field vc: %q repeated", i+2, name)
		case err != nil || n < 1 || n > 100000:
			return nil, fmt.Errorf("philly_vc.csv row %d: field node num: %q is not a count in 1..100000", i+2, row[1])
		}
		seen[name] = true
		out = append(out, HeliosVC{Name: name, Nodes: n})
	}
	return out, nil
}

// HeliosVC is one virtual cluster of the experiment.
type HeliosVC struct {
	Name  string
	Nodes int
}

// HeliosWorkload is the experiment's jobs split by VC, with the clusters
// they run on.
type HeliosWorkload struct {
	VCs  []HeliosVC
	Jobs map[string][]sim.Job
	// Split is the arrival separating the training part of the window
	// (before) from the held-out part.
	Split time.Duration
}

// NewHeliosWorkload selects the window's jobs of the given VCs from the
// Philly trace (arrivals counted from epoch), and re-bases arrivals on the
// window's start. split is the calendar time where training ends. load
// above 1 divides every arrival (and the split) by it: the same jobs in
// less time, a stated way to make the lightly loaded VCs contended; 1 is
// the experiment as published.
func NewHeliosWorkload(jobs []trace.Job, epoch time.Time, vcs []HeliosVC, split time.Time, load float64) (HeliosWorkload, error) {
	if !(load >= 1 && load <= 100) {
		return HeliosWorkload{}, fmt.Errorf("helios: load %v is outside 1..100", load)
	}
	w := HeliosWorkload{VCs: vcs, Jobs: map[string][]sim.Job{}, Split: time.Duration(float64(split.Sub(HeliosWindowStart)) / load)}
	known := map[string]bool{}
	for _, v := range vcs {
		known[v.Name] = true
	}
	from, to := HeliosWindowStart.Sub(epoch), HeliosWindowEnd.Sub(epoch)
	for _, j := range jobs {
		if !known[j.Queue] || j.Arrival < from || j.Arrival > to || j.TotalGPUs() < 1 {
			continue
		}
		sj := sim.JobsFromTrace([]trace.Job{j})[0]
		sj.Arrival = time.Duration(float64(sj.Arrival-from) / load)
		w.Jobs[j.Queue] = append(w.Jobs[j.Queue], sj)
	}
	if len(w.Jobs) == 0 {
		return w, fmt.Errorf("helios: no Philly job of the VCs falls in %s .. %s", HeliosWindowStart, HeliosWindowEnd)
	}
	for _, js := range w.Jobs {
		slices.SortStableFunc(js, func(a, b sim.Job) int { return cmp.Compare(a.Arrival, b.Arrival) })
	}
	return w, nil
}

// cluster is a VC's nodes: n × 8 GPUs, no CPU or memory limits (the
// artifact models GPUs only).
func (v HeliosVC) cluster() *sim.Cluster {
	c := &sim.Cluster{}
	for i := 0; i < v.Nodes; i++ {
		c.Nodes = append(c.Nodes, scoring.NewNode(fmt.Sprintf("%s-%03d", v.Name, i), "", heliosGPUsPerNode, 0, 0))
	}
	return c
}

// HeliosPolicy is one row of the table: how each VC's replay is configured.
type HeliosPolicy struct {
	Name string
	// Config returns a fresh configuration per VC replay (a predictor
	// learns per replay).
	Config func() (sim.Config, error)
	// Jobs rewrites the jobs before the replay (true durations for an
	// oracle, priorities); nil leaves them.
	Jobs func([]sim.Job) []sim.Job
	// Preemption lets higher-priority jobs evict lower-priority ones.
	Preemption bool
}

// ConsolidateWeights is the artifact's consolidate placement for jobs of
// up to 8 GPUs: the node with the fewest free GPUs that fits (best fit).
// Larger jobs are gangs of whole-node members, which any weights place on
// empty nodes.
func ConsolidateWeights() scoring.Weights { return scoring.Weights{scoring.TermBestFit: 1} }

// HeliosFIFO is the artifact's FIFO: arrival order, no backfill.
func HeliosFIFO() HeliosPolicy {
	return HeliosPolicy{Name: "fifo", Config: func() (sim.Config, error) {
		return sim.Config{Params: scoring.Params{Weights: ConsolidateWeights()}, NoBackfill: true}, nil
	}}
}

// HeliosSJF is the artifact's SJF: the true duration first (an oracle), no
// backfill. Shortest-service orders by predicted run time × GPUs, so the
// oracle's prediction is the duration divided by the job's GPUs, which
// makes its service key the duration itself.
func HeliosSJF() HeliosPolicy {
	return HeliosPolicy{Name: "sjf", Config: func() (sim.Config, error) {
		return sim.Config{Params: scoring.Params{Weights: ConsolidateWeights(), Order: scoring.OrderShortestService}, NoBackfill: true}, nil
	}, Jobs: func(js []sim.Job) []sim.Job {
		out := slices.Clone(js)
		for i := range out {
			out[i].Predicted = out[i].Duration / time.Duration(max(out[i].DemandMilli()/scoring.MilliPerGPU, 1))
		}
		return out
	}}
}

// SchedloopPolicy replays under schedloop's rules with s's order,
// starvation bound and reservation and consolidate placement, run times
// predicted online from the jobs finished so far.
func SchedloopPolicy(name string, s HeliosSetting, opt predict.Options) HeliosPolicy {
	return HeliosPolicy{Name: name, Config: func() (sim.Config, error) {
		p, err := predict.New(opt)
		if err != nil {
			return sim.Config{}, err
		}
		params := scoring.Params(s)
		params.Weights = ConsolidateWeights()
		return sim.Config{Params: params, Predictor: OnlinePredictor{P: p}}, nil
	}}
}

// OnlinePredictor adapts a predict.Predictor to a replay: a job's features
// are its queue, GPUs and priority, and with Names its normalised name.
type OnlinePredictor struct {
	P *predict.Predictor
	// Names keys jobs by their normalised names too. Trace jobs named by
	// their row (Philly's philly-NNNNNN) must not: one name for every job
	// would shadow the queue levels.
	Names bool
}

func (o OnlinePredictor) features(j *sim.Job) predict.Features {
	f := predict.JobFeatures(j.Name, j.Queue, j.DemandMilli(), j.Priority)
	if !o.Names {
		f.Name = ""
	}
	return f
}

// Predict implements sim.Predictor.
func (o OnlinePredictor) Predict(j *sim.Job, _ time.Duration) time.Duration {
	d, _ := o.P.Predict(o.features(j))
	return d
}

// Observe implements sim.Predictor.
func (o OnlinePredictor) Observe(j *sim.Job, ran, now time.Duration) {
	o.P.Observe(o.features(j), ran, now)
}

// TablePredictor predicts in a replay as the scheduler does: from the
// predictor table published with a profile, each job keyed as the history
// predictor keyed it (its stored namespace/name, queue, GPUs, priority),
// learning nothing, since the scheduler only reads the table.
type TablePredictor struct{ P *predict.Predictor }

// Predict implements sim.Predictor.
func (t TablePredictor) Predict(j *sim.Job, _ time.Duration) time.Duration {
	d, _ := t.P.Predict(predict.JobFeatures(j.Name, j.Queue, j.DemandMilli(), j.Priority))
	return d
}

// Observe implements sim.Predictor: a published table does not learn.
func (TablePredictor) Observe(*sim.Job, time.Duration, time.Duration) {}

// newHistoryPredictor is the predictor a replay of stored history uses:
// the documented defaults, jobs keyed by name as well.
func newHistoryPredictor() sim.Predictor {
	p, err := predict.New(predict.DefaultOptions())
	if err != nil {
		panic("tuner: the default predictor options are invalid: " + err.Error())
	}
	return OnlinePredictor{P: p, Names: true}
}

// FitPredictor is the predictor a replay of jobs ends with (the history
// predictor, taught every job in the order they end), as a table to
// publish beside the profile.
func FitPredictor(jobs []sim.Job) predict.Table {
	op := newHistoryPredictor().(OnlinePredictor)
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	end := func(i int) time.Duration { return jobs[i].Arrival + jobs[i].Duration }
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(end(a), end(b)) })
	for _, i := range order {
		op.Observe(&jobs[i], jobs[i].Duration, end(i))
	}
	return op.P.Table()
}

// HeliosOutcome is one policy's result: job-weighted means over all VCs.
type HeliosOutcome struct {
	Policy              string
	Jobs, Unfinished    int
	AvgJCT, AvgQueue    float64
	P95HighPriorityWait float64
	// HeldOut are the same means over jobs submitted after the split.
	HeldOutJCT, HeldOutQueue float64
	PerVC                    map[string][2]float64
	Metrics                  sim.Metrics // all jobs together (times), for the objective
	// Prediction is the accuracy of the run times predicted at submission
	// for the held-out jobs.
	Prediction predict.Accuracy
}

// RunHelios replays every VC under p (VCs in parallel, workers at most)
// over the jobs arriving before until (0: all) and combines them.
func RunHelios(ctx context.Context, w HeliosWorkload, p HeliosPolicy, until time.Duration, highPriority int32, workers int) (HeliosOutcome, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	type vcRes struct {
		jobs []sim.Job
		res  sim.Result
		err  error
	}
	results := make([]vcRes, len(w.VCs))
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i, vc := range w.VCs {
		jobs := w.Jobs[vc.Name]
		if until > 0 {
			k, _ := slices.BinarySearchFunc(jobs, until, func(j sim.Job, t time.Duration) int { return cmp.Compare(j.Arrival, t) })
			jobs = jobs[:k]
		}
		if p.Jobs != nil {
			jobs = p.Jobs(jobs)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				results[i].err = ctx.Err()
				return
			}
			cfg, err := p.Config()
			if err != nil {
				results[i].err = err
				return
			}
			cfg.HighPriority = highPriority
			cfg.Preemption = p.Preemption
			res, err := sim.RunContext(ctx, vc.cluster(), jobs, cfg)
			results[i] = vcRes{jobs: jobs, res: res, err: err}
		}()
	}
	wg.Wait()
	out := HeliosOutcome{Policy: p.Name, PerVC: map[string][2]float64{}}
	var jct, queue, hp []float64
	var heldJCT, heldQueue, heldPred, heldRan []float64
	for i, r := range results {
		if r.err != nil {
			return out, fmt.Errorf("helios %s, VC %s: %w", p.Name, w.VCs[i].Name, r.err)
		}
		var vj, vq []float64
		for k, o := range r.res.Jobs {
			j := r.jobs[k]
			out.Jobs++
			if o.State != sim.Done {
				out.Unfinished++
				continue
			}
			// Queueing runs to the first start, as sim.Metrics counts it: an
			// evicted job's lost run is run time.
			c, q := (o.End - j.Arrival).Seconds(), (o.FirstStart - j.Arrival).Seconds()
			vj, vq = append(vj, c), append(vq, q)
			if j.Priority >= highPriority && highPriority > 0 {
				hp = append(hp, q)
			}
			if j.Arrival >= w.Split {
				heldJCT, heldQueue = append(heldJCT, c), append(heldQueue, q)
				heldPred, heldRan = append(heldPred, o.Predicted.Seconds()), append(heldRan, j.Duration.Seconds())
			}
		}
		out.PerVC[w.VCs[i].Name] = [2]float64{mean(vj), mean(vq)}
		jct, queue = append(jct, vj...), append(queue, vq...)
	}
	out.AvgJCT, out.AvgQueue = mean(jct), mean(queue)
	out.HeldOutJCT, out.HeldOutQueue = mean(heldJCT), mean(heldQueue)
	out.P95HighPriorityWait = p95(hp)
	out.Prediction = predict.Measure(heldPred, heldRan)
	out.Metrics = sim.Metrics{Jobs: out.Jobs, Completed: len(jct), MeanJCT: out.AvgJCT, MeanWait: out.AvgQueue,
		P95JCT: p95(jct), P95HighPriorityWait: out.P95HighPriorityWait}
	return out, nil
}

// MarkHighPriority is the stated, seeded rule of the high-priority run:
// a job is high priority when IsHighPriority says so — about one job in
// ten, independent of its shape or time.
func MarkHighPriority(seed uint64, prio int32) func([]sim.Job) []sim.Job {
	return func(js []sim.Job) []sim.Job {
		out := slices.Clone(js)
		for i := range out {
			if IsHighPriority(seed, out[i].Name) {
				out[i].Priority = prio
			}
		}
		return out
	}
}

// IsHighPriority is the seeded high-priority rule for traces that record
// no priorities (the hp row of the Helios table, the demo): the FNV-1a hash
// of "seed/name" is 0 modulo 10.
func IsHighPriority(seed uint64, name string) bool {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, name)
	return h.Sum64()%10 == 0
}

// HeliosGrid is the order, starvation and reservation settings the tuned
// row chooses among on the training part of the window.
func HeliosGrid() []HeliosSetting {
	var out []HeliosSetting
	for _, pol := range scoring.OrderPolicies {
		for _, bound := range []time.Duration{0, 12 * time.Hour, 48 * time.Hour} {
			for _, res := range []struct {
				on        bool
				threshold time.Duration
			}{{false, 0}, {true, 0}, {true, time.Hour}} {
				out = append(out, HeliosSetting{Order: pol, StarvationBound: bound, Reservation: res.on, ReservationThreshold: res.threshold})
			}
		}
	}
	return out
}

// HeliosSetting is one point of HeliosGrid: the queue-policy fields of a
// profile (its weights are the experiment's consolidate placement).
type HeliosSetting scoring.Params

func (s HeliosSetting) String() string {
	r := "off"
	if s.Reservation {
		r = fmt.Sprintf("after %s", s.ReservationThreshold)
	}
	return fmt.Sprintf("order=%s starvation=%s reservation=%s", scoring.Params(s).EffectiveOrder(), s.StarvationBound, r)
}

// TuneHelios replays every setting of grid on the jobs arriving before
// w.Split and returns the one of lowest cost under o against the default
// setting (the first of grid), with every setting's cost.
func TuneHelios(ctx context.Context, w HeliosWorkload, grid []HeliosSetting, o Objective, opt predict.Options, workers int) (HeliosSetting, map[string]float64, error) {
	costs := map[string]float64{}
	var base Values
	best, bestCost := HeliosSetting{}, 0.0
	for i, s := range grid {
		out, err := RunHelios(ctx, w, SchedloopPolicy(s.String(), s, opt), w.Split, 0, workers)
		if err != nil {
			return best, costs, err
		}
		v := ValuesOf(out.Metrics)
		if i == 0 {
			base = v
		}
		c := o.Cost(v, base)
		costs[s.String()] = c
		if i == 0 || c < bestCost {
			best, bestCost = s, c
		}
	}
	return best, costs, nil
}

// SortedCosts lists costs by value, for printing.
func SortedCosts(costs map[string]float64) []string {
	keys := slices.Collect(maps.Keys(costs))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(costs[a], costs[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return keys
}
