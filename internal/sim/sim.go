package sim

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
)

// Config is one candidate: the scheduler parameters a replay runs under.
type Config struct {
	// Params are the profile's parameters, meaning what they mean live
	// (see scoring.Params for every zero value). Weights are ignored when
	// Policy is set.
	scoring.Params
	// Policy, when set, replaces Weights with one of the FGD paper's
	// policies; PolicyRandom draws from Seed.
	Policy scoring.Policy
	Seed   uint64
	// Workload is the typical pod mix fragmentation is measured against;
	// nil derives it from the replayed jobs (95% coverage, as the paper).
	Workload scoring.Workload
	// Preemption lets a lone pod that fits nowhere evict whole running jobs
	// of lower priority by scoring's preemption rule (Params.PreemptOnNode,
	// scoring.BetterPreemption), which the SchedloopPreemption plugin
	// applies live: the fewest GPU-hours lost, never a non-preemptible job
	// nor one younger than PreemptMinRunTime, a gang evicted whole. Gangs
	// do not preempt (scoring.PreemptsFor), here or live.
	Preemption bool
	// HighPriority is the priority at or above which a job counts as
	// critical for Metrics.P95HighPriorityWait.
	HighPriority int32
	// RecordPlacements keeps each job's node names in its Outcome.
	RecordPlacements bool
	// PercentageOfNodesToScore is the scheduler profile's field of that
	// name: a lone pod is scored on that share of the cluster's feasible
	// nodes, found from a rotating start as kube-scheduler finds them. 0 is
	// kube-scheduler's adaptive default (what schedloop's profile ships
	// with); 100 scores every node. Clusters under 100 nodes are always
	// scored whole.
	PercentageOfNodesToScore int
	// NoBackfill stops each scheduling pass at the first job that cannot
	// start: no later job starts before it, whatever it would fit. It is
	// the rule of the reference policies of published experiments (FIFO
	// and SJF without backfill), not one a profile sets, and it overrides
	// Params.Reservation.
	NoBackfill bool
	// Predictor predicts each job's run time at its arrival and learns from
	// each job that finishes, so a replay orders and reserves by what was
	// known at the time. Nil uses each Job's Predicted.
	Predictor Predictor
	// Kueue, when set, puts Kueue in front of the scheduler: the jobs it
	// names are admitted by quota first (kueue.go) and queue for placement
	// from their admission. Nil: no Kueue, every job queues at its arrival.
	Kueue *KueueFront
	// StopOnceStarted, when positive, ends the replay at the first instant
	// each of the first StopOnceStarted jobs (in input order) has started
	// at least once or can never start; jobs running then are Running and
	// jobs waiting Unfinished, and the metrics cover only what happened.
	// Zero replays until nothing else can happen. An estimate asks only
	// when its jobs start, and replaying the jobs queued behind them to
	// their ends would be most of its cost.
	StopOnceStarted int
	// StartLatency is how long after the scheduler's decision a job starts
	// running: a live control plane takes that long from a pod becoming
	// placeable to its binding being stored, and a compressed clock
	// multiplies it. The job's GPUs are held from the decision, its run
	// (and its recorded start, hence its wait) begins StartLatency later.
	// Zero: jobs start when they are placed, as the trace's own cluster
	// recorded them. Jobs a snapshot found running (Job.RunningOn) start
	// at once. tuner.StartLatency estimates it from stored history.
	StartLatency time.Duration
	// StartLatencySpread, when set, replaces StartLatency with one of its
	// values for each job, picked by a hash of the job's name, so a job
	// waits as long in every replay. The live control plane's latency is
	// spread, its tail several times its median, and a figure of few jobs'
	// tail (the high-priority p95 wait) is that tail, which one median
	// cannot give. tuner.StartLatencies estimates it from stored history.
	StartLatencySpread []time.Duration
}

// Predictor predicts run times from what a replay has seen so far.
type Predictor interface {
	// Predict is j's expected run time when it arrives at now.
	Predict(j *Job, now time.Duration) time.Duration
	// Observe hears that j ran for ran and ended at now.
	Observe(j *Job, ran, now time.Duration)
}

// Outcome is what happened to one job.
type Outcome struct {
	State State
	// Start is when the job's last run began, End when it ended;
	// FirstStart when its first run began. A job evicted (Preemptions)
	// runs again from the start, its whole Duration, and its wait in
	// Metrics is to FirstStart, as the collector's queueing is to a job's
	// first admission (store.DeriveJobs): the time an eviction costs is
	// counted as run time on both sides.
	Start, End  time.Duration
	FirstStart  time.Duration
	Preemptions int
	// Evicted counts the jobs evicted to start this one (over all its starts).
	Evicted int
	Nodes   []string
	// Predicted is the run time predicted when the job arrived.
	Predicted time.Duration
}

// State is where a job ended the replay.
type State string

const (
	Done          State = "done"
	Unschedulable State = "unschedulable" // larger than the empty cluster or its queue limit
	Unfinished    State = "unfinished"    // still waiting when nothing else could happen
	Running       State = "running"       // running when the replay stopped (Config.StopOnceStarted)
)

// Metrics summarise a replay. Times are in seconds; shares are 0..1.
type Metrics struct {
	Jobs, Completed, Unschedulable, Unfinished, Preemptions int
	// GPUIdleShare is IdleWaitingShare + AllocatedIdleShare: GPU time that
	// was unallocated while demand waited, or allocated but idle, over all
	// GPU time of the replay.
	GPUIdleShare       float64
	IdleWaitingShare   float64
	AllocatedIdleShare float64
	MeanJCT, P95JCT    float64
	MeanWait           float64
	// P95HighPriorityWait is the 95th percentile queueing delay of jobs at
	// or above Config.HighPriority (0 when there are none).
	P95HighPriorityWait float64
	// Fragmentation is the time-averaged expected fragmented GPU capacity,
	// in percent of the cluster's GPUs.
	Fragmentation float64
	Makespan      float64
}

// Result is a replay's per-job outcomes (in input order) and metrics.
type Result struct {
	Jobs    []Outcome
	Metrics Metrics
	// Kueue is what Kueue did, when Config.Kueue put it in front.
	Kueue *KueueOutcome
}

type status uint8

const (
	waiting status = iota
	running
	finished
	never
)

type jobState struct {
	job     *Job
	idx     int
	shape   int
	key     scoring.QueueKey
	status  status
	allocs  []scoring.Allocation
	nodeIdx []int
	start   time.Duration
	end     time.Duration
	epoch   int
	tried   int64 // release generation of the last failed attempt; -1: never tried
	// retryAt is when a gang released part-placed may be tried again
	// (scoring.GangRetryAt).
	retryAt time.Duration
	counted bool          // queue usage holds this job
	begun   bool          // started at least once
	first   time.Duration // start of the first run
	placed  []string
	preempt int
	evicted int // jobs evicted so that this one could start
	// predicted is the run time predicted at arrival.
	predicted time.Duration
	// limit is the job's queue's limit (Params.Limit), looked up once: a
	// replay's parameters do not change.
	limit scoring.QueueLimit
}

const (
	evDepart = iota
	evRetry
	evArrive
)

type event struct {
	at    time.Duration
	kind  int
	job   *jobState
	epoch int
	seq   int
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.seq < b.seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type podRef struct {
	js     *jobState
	member int
}

type replay struct {
	cfg      Config
	p        *placer
	capacity int64
	events   eventHeap
	seq      int
	pending  []*jobState
	gen      int64
	usage    map[string]scoring.QueueUsage
	onNode   [][]podRef
	emptyCap map[string]int // shape key -> pods of that shape the empty cluster holds

	// integrals over time (milli-GPU seconds)
	last    time.Duration
	started bool
	// measureFrom is when the integrals start when some jobs are
	// Job.Warmup (warmup): the first arrival of a measured job.
	measureFrom                time.Duration
	warmup                     bool
	allocated                  int64
	waiting                    int64 // milli-GPU demand of queued jobs
	lowest                     int32 // lowest priority of any job: nobody can preempt at it
	busy                       float64
	idleWait, allocIdle, total float64
	fragInt                    float64
	preemptions                int

	// attained is each queue's attained service (least-attained order).
	attained map[string]*scoring.AttainedService
	// unstarted counts the jobs Config.StopOnceStarted waits for that
	// have not started yet and may still.
	unstarted int
}

// Run replays jobs on a copy of c under cfg. It is deterministic: the same
// inputs give the same result.
func Run(c *Cluster, jobs []Job, cfg Config) (Result, error) {
	return RunContext(context.Background(), c, jobs, cfg)
}

// cancelCheckEvery is how many instants a replay plays between looks at
// its context: a look takes a lock, an instant a few microseconds, and a
// cancelled replay of a month stops within a millisecond or so.
const cancelCheckEvery = 256

// RunContext is Run stopped when ctx is done: it then returns ctx's error
// (wrapped) and no result. A replay of a long trace, or of a snapshot that
// draws weeks of later submissions, runs for minutes, and an interrupted
// command must not wait for it.
func RunContext(ctx context.Context, c *Cluster, jobs []Job, cfg Config) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("replay: %w", err)
	}
	if cfg.Kueue != nil {
		return runBehindKueue(ctx, c, jobs, cfg)
	}
	weights := cfg.Weights
	if cfg.Policy != "" {
		weights = cfg.Policy.Weights()
	}
	if cfg.Policy != scoring.PolicyRandom {
		p := cfg.Params
		p.Weights = weights
		if err := p.Validate(); err != nil {
			return Result{}, fmt.Errorf("replay: %w", err)
		}
	}

	cl := c.Clone()
	s := scoring.Scorer{Weights: weights, Workload: cfg.Workload}
	if s.Workload == nil && weights[scoring.TermFragmentation] > 0 {
		s.Workload = scoring.TypicalWorkload(Requests(jobs), 0.95)
	}
	r := &replay{cfg: cfg, p: newPlacer(cl, s, cfg.Policy == scoring.PolicyRandom, cfg.Seed, -1, cfg.PercentageOfNodesToScore),
		capacity: cl.GPUMilli(), usage: map[string]scoring.QueueUsage{}, onNode: make([][]podRef, len(cl.Nodes)),
		emptyCap: map[string]int{}, attained: map[string]*scoring.AttainedService{}}
	firstMeasured := true
	for i, j := range jobs {
		if i == 0 || j.Priority < r.lowest {
			r.lowest = j.Priority
		}
		if j.Warmup {
			r.warmup = true
		} else if firstMeasured || j.Arrival < r.measureFrom {
			r.measureFrom, firstMeasured = j.Arrival, false
		}
	}
	states := make([]*jobState, len(jobs))
	var pinned []*jobState
	for i := range jobs {
		j := &jobs[i]
		if j.Members < 1 {
			return Result{}, fmt.Errorf("replay: job %s: %d members", j.Name, j.Members)
		}
		if err := j.Request.Validate(); err != nil {
			return Result{}, fmt.Errorf("replay: job %s: %w", j.Name, err)
		}
		key := shapeKey(j.Request)
		qk := scoring.QueueKey{Priority: j.Priority, Created: int64(j.Submitted()), Name: j.Name}
		if j.Members > 1 {
			qk.Gang = j.Name
		}
		js := &jobState{job: j, idx: i, shape: r.p.shape(key), tried: -1, key: qk, limit: cfg.Limit(j.Queue)}
		states[i] = js
		if len(j.RunningOn) > 0 {
			pinned = append(pinned, js)
			continue
		}
		if !r.feasible(j, key) {
			js.status = never
		} else if i < cfg.StopOnceStarted {
			r.unstarted++
		}
		r.push(event{at: j.Arrival, kind: evArrive, job: js})
	}
	if err := r.pin(pinned); err != nil {
		return Result{}, err
	}
	for n := 1; len(r.events) > 0 && (cfg.StopOnceStarted <= 0 || r.unstarted > 0); n++ {
		if n%cancelCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return Result{}, fmt.Errorf("replay: %w", err)
			}
		}
		t := r.events[0].at
		r.advance(t)
		for len(r.events) > 0 && r.events[0].at == t {
			r.handle(heap.Pop(&r.events).(event))
		}
		r.schedule(t)
		if len(r.events) == 0 {
			r.wakeBackingOff(t)
		}
	}
	return r.result(states), nil
}

// pin starts the jobs a snapshot found running on the nodes it found them
// on, before the first arrival, so the replay goes on from that state.
func (r *replay) pin(jobs []*jobState) error {
	if len(jobs) == 0 {
		return nil
	}
	index := make(map[string]int, len(r.p.nodes))
	for i, n := range r.p.nodes {
		index[n.Name] = i
	}
	for _, js := range jobs {
		j := js.job
		if len(j.RunningOn) != j.Members {
			return fmt.Errorf("replay: running job %s: %d nodes for %d members", j.Name, len(j.RunningOn), j.Members)
		}
		if len(r.events) > 0 && r.events[0].at < j.Arrival {
			return fmt.Errorf("replay: running job %s: found running at %v, after a job arrives at %v", j.Name, j.Arrival, r.events[0].at)
		}
		for m, name := range j.RunningOn {
			i, ok := index[name]
			if !ok {
				return fmt.Errorf("replay: running job %s: member %d on node %q, which the cluster does not have", j.Name, m, name)
			}
			a, ok := r.p.placeOn(i, j.Request, uint64(js.idx)*1024+uint64(m))
			if !ok {
				return fmt.Errorf("replay: running job %s: member %d does not fit on node %q beside the jobs pinned there before it", j.Name, m, name)
			}
			js.allocs, js.nodeIdx = append(js.allocs, a), append(js.nodeIdx, i)
		}
		js.predicted = j.Predicted
		r.waiting += j.DemandMilli() // begin takes it off again
		r.advance(j.Arrival)
		r.begin(js, j.Arrival, 0)
	}
	return nil
}

func shapeKey(r scoring.Request) string {
	return fmt.Sprintf("%d/%d/%d/%d/%v/%v", r.CPUMilli, r.MemoryMiB, r.GPUs, r.GPUMilli, r.GPUModels, r.MIG)
}

// feasible reports whether the job could ever start: its members fit the
// empty cluster and its demand fits its queue's GPU limit.
func (r *replay) feasible(j *Job, key string) bool {
	c, ok := r.emptyCap[key]
	if !ok {
		for _, n := range r.p.nodes {
			c += scoring.Capacity(n.Empty(), j.Request)
		}
		r.emptyCap[key] = c
	}
	if c < j.Members {
		return false
	}
	return scoring.QueueAdmits(r.cfg.Limit(j.Queue), scoring.QueueUsage{}, j.DemandMilli(), j.Members > 1)
}

func (r *replay) push(e event) {
	e.seq = r.seq
	r.seq++
	heap.Push(&r.events, e)
}

// advance integrates the GPU-time accounts up to t.
func (r *replay) advance(t time.Duration) {
	if !r.started {
		r.last, r.started = t, true
		return
	}
	if t <= r.last {
		return
	}
	from := r.last
	if r.warmup {
		from = max(from, r.measureFrom)
	}
	r.last = t
	dt := (t - from).Seconds()
	if dt <= 0 {
		return
	}
	free := r.capacity - r.allocated
	r.idleWait += float64(min(free, r.waiting)) * dt
	r.allocIdle += (float64(r.allocated) - r.busy) * dt
	r.total += float64(r.capacity) * dt
	r.fragInt += r.p.fragSum * dt
}

func (r *replay) handle(e event) {
	js := e.job
	switch e.kind {
	case evArrive:
		if js.status == never {
			return
		}
		js.predicted = js.job.Predicted
		if r.cfg.Predictor != nil {
			js.predicted = r.cfg.Predictor.Predict(js.job, e.at)
		}
		js.key.Service = scoring.PredictedService(js.predicted, js.job.DemandMilli())
		r.enqueue(js)
	case evRetry:
		if js.status == waiting && e.epoch == js.epoch {
			js.tried = -1
		}
	case evDepart:
		if js.status != running || e.epoch != js.epoch {
			return
		}
		r.stop(js)
		js.status, js.end = finished, e.at
		if r.cfg.Predictor != nil {
			r.cfg.Predictor.Observe(js.job, e.at-js.start, e.at)
		}
	}
}

// wakeBackingOff tries again, when their backoffs end, the gangs still
// backing off once nothing else is left to happen after now, as the gang
// plugin moves a gang's members to the active queue when its backoff ends.
// A gang backing off is otherwise tried at the first pass after its
// backoff at which it may be tried (something was released since it
// failed): a pass of its own at every backoff's end would retry a gang
// that fits nowhere every DefaultGangBackoff for as long as it waits.
func (r *replay) wakeBackingOff(now time.Duration) {
	for _, js := range r.pending {
		if js.retryAt > now {
			r.push(event{at: js.retryAt, kind: evRetry, job: js, epoch: js.epoch})
		}
	}
}

func (r *replay) enqueue(js *jobState) {
	js.status = waiting
	r.waiting += js.job.DemandMilli()
	i, _ := slices.BinarySearchFunc(r.pending, js, r.compare(js.job.Arrival))
	r.pending = slices.Insert(r.pending, i, js)
}

func (r *replay) member(js *jobState) int64 { return js.job.Request.TotalGPUMilli() }

// stop releases a running job's pods and its queue usage.
func (r *replay) stop(js *jobState) {
	per := r.member(js)
	for k, a := range js.allocs {
		r.p.release(js.nodeIdx[k], a)
		r.dropRef(js.nodeIdx[k], js)
	}
	r.allocated -= per * int64(len(js.allocs))
	r.busy -= float64(per*int64(len(js.allocs))) * js.job.Util
	r.account(js, r.last, -float64(js.job.DemandMilli())/scoring.MilliPerGPU)
	js.allocs, js.nodeIdx = nil, nil
	r.uncount(js)
	r.gen++
}

func (r *replay) count(js *jobState) {
	if js.counted {
		return
	}
	u := r.usage[js.job.Queue]
	u.GPUMilli += js.job.DemandMilli()
	if js.job.Members > 1 {
		u.RunningGangs++
	}
	r.usage[js.job.Queue] = u
	js.counted = true
}

func (r *replay) uncount(js *jobState) {
	if !js.counted {
		return
	}
	u := r.usage[js.job.Queue]
	u.GPUMilli -= js.job.DemandMilli()
	if js.job.Members > 1 {
		u.RunningGangs--
	}
	r.usage[js.job.Queue] = u
	js.counted = false
}

func (r *replay) dropRef(node int, js *jobState) {
	refs := r.onNode[node]
	for k := 0; k < len(refs); k++ {
		if refs[k].js == js {
			refs = slices.Delete(refs, k, k+1)
			k--
		}
	}
	r.onNode[node] = refs
}

// schedule tries waiting jobs in queue order. A job is retried only when
// something was released since its last failed attempt: allocations alone
// cannot make room. Within one pass a lone pod's shape that failed fails
// again until something is released.
func (r *replay) schedule(t time.Duration) {
	if len(r.pending) == 0 {
		return
	}
	if r.cfg.DynamicOrder() {
		r.refreshAttained(t)
		slices.SortStableFunc(r.pending, r.compare(t))
	}
	failed := &shapeMemo{gen: r.gen, shapes: map[int]bool{}, gangs: map[int]int{}}
	// Under a reservation a job may use the reserved nodes or not depending
	// on its predicted end, so failures are remembered for each case apart.
	var underRes [2]*shapeMemo
	var res *scoring.Reservation
	planned, blocked := false, false
	// fail is called for each job that cannot start now, in order.
	fail := func(js *jobState) {
		if r.cfg.NoBackfill {
			blocked = true
			return
		}
		if !planned && r.cfg.WantsReservation(int64(js.job.Submitted()), int64(t)) {
			planned = true
			if rr, ok := r.planReservation(js, t); ok {
				res = &rr
				for k := range underRes {
					underRes[k] = &shapeMemo{gen: r.gen, shapes: map[int]bool{}, gangs: map[int]int{}}
				}
			}
		}
	}
	queue := r.pending
	r.pending = nil
	// Kept jobs are written over the ones already read: the pass needs no
	// second slice.
	keep := queue[:0]
	for _, js := range queue {
		if blocked || js.tried == r.gen || t < js.retryAt {
			keep = append(keep, js)
			if !blocked {
				fail(js)
			}
			continue
		}
		memo := failed
		if res != nil {
			end := int64(t + js.predicted)
			before := 0
			if end <= res.Start {
				before = 1
			}
			memo = underRes[before]
			r.p.admit = func(i int) bool { return res.Admits(i, end) }
		}
		started := r.try(js, t, memo)
		r.p.admit = nil
		if started {
			continue
		}
		if res == nil {
			// Without a reservation's restriction the failure holds until
			// something is released.
			js.tried = r.gen
		}
		// A job its queue refuses does not preempt: evictions free no share
		// of its queue (live, the queue plugin's refusal is unresolvable by
		// preemption), and placing it would carry its queue past the limit.
		if r.cfg.Preemption && scoring.PreemptsFor(js.job.Members) && js.status == waiting && js.job.Priority > r.lowest &&
			scoring.QueueAdmits(r.cfg.Limit(js.job.Queue), r.usage[js.job.Queue], js.job.DemandMilli(), false) && r.preempt(js, t) {
			continue
		}
		keep = append(keep, js)
		fail(js)
	}
	// Preempted jobs were collected in r.pending; they arrive anew
	// (scoring.Requeue) and rejoin in order.
	scoring.Requeue(int64(t), len(r.pending), func(i int) *scoring.QueueKey { return &r.pending[i].key })
	if len(r.pending) > 0 {
		// What was kept is in the order of the pass (sorted at its start
		// when the order moves with time), so only requeued jobs need
		// placing.
		keep = append(keep, r.pending...)
		slices.SortStableFunc(keep, r.compare(t))
	}
	r.pending = keep
}

// compare orders waiting jobs at t (scoring.CompareOrder).
func (r *replay) compare(t time.Duration) func(a, b *jobState) int {
	return func(a, b *jobState) int { return scoring.CompareOrder(r.cfg.Params, int64(t), a.key, b.key) }
}

// refreshAttained gives each waiting job its queue's attained service at t.
func (r *replay) refreshAttained(t time.Duration) {
	if r.cfg.Order != scoring.OrderFairShare {
		return
	}
	hl := scoring.DefaultAttainedHalfLife
	for _, js := range r.pending {
		if a := r.attained[js.job.Queue]; a != nil {
			js.key.Attained = a.Attained(int64(t), hl)
		} else {
			js.key.Attained = 0
		}
	}
}

// account moves js's queue's attained service to t, adding gpus running.
func (r *replay) account(js *jobState, t time.Duration, gpus float64) {
	if r.cfg.Order != scoring.OrderFairShare {
		return
	}
	a := r.attained[js.job.Queue]
	if a == nil {
		a = &scoring.AttainedService{At: int64(t)}
		r.attained[js.job.Queue] = a
	}
	a.Advance(int64(t), scoring.DefaultAttainedHalfLife, gpus)
}

// planReservation reserves for js from the predicted ends of the running
// jobs (scoring.PlanReservation), placing it on each trial cluster the way
// try would.
func (r *replay) planReservation(js *jobState, t time.Duration) (scoring.Reservation, bool) {
	var running []scoring.Ending
	seen := map[*jobState]bool{}
	for _, refs := range r.onNode {
		for _, ref := range refs {
			o := ref.js
			if seen[o] {
				continue
			}
			seen[o] = true
			running = append(running, scoring.Ending{Nodes: o.nodeIdx, Allocs: o.allocs, End: int64(o.start + o.predicted)})
		}
	}
	j := js.job
	return scoring.PlanReservation(r.p.nodes, running, int64(t), func(trial []*scoring.Node) []int {
		return scoring.PlaceTrialJob(trial, j.Request, j.Members, r.p.depth, r.p.maxLevel, r.p.scorer)
	})
}

// shapeMemo remembers, for release generation gen, the lone-pod shapes
// that fitted nowhere and the smallest gang of each shape that could not be
// placed: until something is released, they and larger gangs fail again.
type shapeMemo struct {
	gen    int64
	shapes map[int]bool
	gangs  map[int]int
}

func (m *shapeMemo) reset(gen int64) {
	if m.gen != gen {
		m.gen = gen
		clear(m.shapes)
		clear(m.gangs)
	}
}

func (m *shapeMemo) failed(gen int64, shape int) bool {
	m.reset(gen)
	return m.shapes[shape]
}

func (m *shapeMemo) gangFailed(gen int64, shape, members int) bool {
	m.reset(gen)
	least, ok := m.gangs[shape]
	return ok && members >= least
}

// try attempts to start js now; it reports whether js left the queue.
func (r *replay) try(js *jobState, t time.Duration, failed *shapeMemo) bool {
	j := js.job
	// A queue without a limit admits everything (scoring.QueueCheck): the
	// usage lookup is skipped, the costliest step of a failed attempt.
	if js.status == waiting && js.limit != (scoring.QueueLimit{}) && !scoring.QueueAdmits(js.limit, r.usage[j.Queue], j.DemandMilli(), j.Members > 1) {
		return false
	}
	pod := uint64(js.idx)
	if j.Members == 1 {
		if failed.failed(r.gen, js.shape) {
			return false
		}
		a, i, ok := r.p.placeOne(j.Request, js.shape, pod)
		if !ok {
			failed.shapes[js.shape] = true
			return false
		}
		js.allocs, js.nodeIdx = []scoring.Allocation{a}, []int{i}
		r.begin(js, t, r.startLatency(js))
		return true
	}
	var allocs []scoring.Allocation
	var idx []int
	ok := !failed.gangFailed(r.gen, js.shape, j.Members)
	if ok {
		allocs, idx, ok = r.p.placeGang(j.Request, j.Members, pod)
	}
	if ok {
		js.allocs, js.nodeIdx = allocs, idx
		r.begin(js, t, r.startLatency(js))
		return true
	}
	if least, seen := failed.gangs[js.shape]; !seen || j.Members < least {
		failed.gangs[js.shape] = j.Members
	}
	// Live, members are placed one at a time once the gang is admitted
	// (scoring.GangFit), and the first that finds no node releases those
	// placed before it: the gang holds nothing and backs off.
	admitted := !r.p.cannotFit(j.Request, j.Members) && scoring.GangFit(r.p.nodes, nil, j.Request, j.Members) >= j.Members
	// Where the first member would go matters only to an admitted gang
	// (GangBacksOff), and the walk to find out is a failed attempt's
	// costliest step on a full cluster.
	if scoring.GangBacksOff(admitted, admitted && r.p.fitsSomewhere(j.Request)) {
		js.retryAt = time.Duration(scoring.GangRetryAt(int64(t), scoring.DefaultGangBackoff))
	}
	return false
}

// begin starts a job whose every member holds its allocation.
// startLatency is Config.StartLatency, or js's value of the spread.
func (r *replay) startLatency(js *jobState) time.Duration {
	n := len(r.cfg.StartLatencySpread)
	if n == 0 {
		return r.cfg.StartLatency
	}
	// FNV-1a, inline: a start must not allocate.
	h := uint64(14695981039346656037)
	for i := 0; i < len(js.job.Name); i++ {
		h = (h ^ uint64(js.job.Name[i])) * 1099511628211
	}
	return r.cfg.StartLatencySpread[h%uint64(n)]
}

func (r *replay) begin(js *jobState, t, latency time.Duration) {
	js.status, js.start = running, t+latency
	if !js.begun {
		js.begun = true
		js.first = js.start
		if js.idx < r.cfg.StopOnceStarted && len(js.job.RunningOn) == 0 {
			r.unstarted--
		}
	}
	r.waiting -= js.job.DemandMilli()
	if r.cfg.RecordPlacements {
		js.placed = js.placed[:0]
		for _, a := range js.allocs {
			js.placed = append(js.placed, a.Node)
		}
	}
	r.count(js)
	per := r.member(js)
	r.allocated += per * int64(len(js.allocs))
	r.busy += float64(per*int64(len(js.allocs))) * js.job.Util
	r.account(js, t, float64(js.job.DemandMilli())/scoring.MilliPerGPU)
	for k, i := range js.nodeIdx {
		r.onNode[i] = append(r.onNode[i], podRef{js: js, member: k})
	}
	r.push(event{at: js.start + js.job.Duration, kind: evDepart, job: js, epoch: js.epoch})
}

// preempt applies scoring's preemption rule: each node's answer
// (Params.PreemptOnNode, over the running jobs with pods there), the one
// scoring.BetterPreemption prefers, then places js on that node, as the
// scheduler binds a preemptor to its nominated node. Victims are stopped
// whole, every member on every node, and return to the queue to start over
// (their pods are deleted, as on a real cluster).
func (r *replay) preempt(js *jobState, t time.Duration) bool {
	j := js.job
	best := -1
	var bestChoice scoring.PreemptionChoice
	var bestVictims []*jobState
	var onNode []*jobState
	var jobs []scoring.VictimJob
	var here [][]scoring.Allocation
	for i, n := range r.p.nodes {
		onNode, jobs, here = onNode[:0], jobs[:0], here[:0]
		for _, ref := range r.onNode[i] {
			k := slices.Index(onNode, ref.js)
			if k < 0 {
				k = len(onNode)
				o := ref.js
				onNode = append(onNode, o)
				jobs = append(jobs, scoring.VictimJob{Name: o.job.Name, Priority: o.job.Priority, Started: int64(o.start),
					NonPreemptible: o.job.NonPreemptible, GPUMilli: o.job.DemandMilli()})
				here = append(here, nil)
			}
			here[k] = append(here[k], ref.js.allocs[ref.member])
		}
		c, ok := r.cfg.PreemptOnNode(n, j.Request, j.Priority, int64(t), jobs, here)
		if !ok || best >= 0 && !scoring.BetterPreemption(c, bestChoice) {
			continue
		}
		best, bestChoice = i, c
		bestVictims = bestVictims[:0]
		for _, k := range c.Victims {
			bestVictims = append(bestVictims, onNode[k])
		}
	}
	if best < 0 {
		return false
	}
	js.evicted += len(bestVictims)
	for _, v := range bestVictims {
		r.stop(v)
		v.epoch++
		v.preempt++
		v.tried = -1
		r.preemptions++
		r.pending = append(r.pending, v)
		r.waiting += v.job.DemandMilli()
		v.status = waiting
	}
	a, ok := r.p.placeOn(best, j.Request, uint64(js.idx))
	if !ok {
		return false
	}
	js.allocs, js.nodeIdx = []scoring.Allocation{a}, []int{best}
	r.begin(js, t, r.startLatency(js))
	return true
}

func (r *replay) result(states []*jobState) Result {
	res := Result{Jobs: make([]Outcome, len(states))}
	m := &res.Metrics
	var jct, waits, hp []float64
	var first, lastEnd time.Duration
	firstSeen := false
	for i, js := range states {
		o := Outcome{Start: js.start, FirstStart: js.first, End: js.end, Preemptions: js.preempt, Evicted: js.evicted, Predicted: js.predicted,
			State: js.state()}
		if o.State == Done || o.State == Running {
			o.Nodes = js.placed
		}
		res.Jobs[i] = o
		if js.job.Warmup {
			continue
		}
		m.Jobs++
		switch o.State {
		case Done:
			m.Completed++
			// A job held by Kueue's quota waited from before it arrived here.
			jct = append(jct, (js.end - js.job.Arrival + js.job.quotaHeld).Seconds())
			w := (js.first - js.job.Arrival + js.job.quotaHeld).Seconds()
			waits = append(waits, w)
			if js.job.Priority >= r.cfg.HighPriority {
				hp = append(hp, w)
			}
			lastEnd = max(lastEnd, js.end)
		case Unschedulable:
			m.Unschedulable++
		case Unfinished:
			m.Unfinished++
		}
		if !firstSeen || js.job.Arrival < first {
			first, firstSeen = js.job.Arrival, true
		}
	}
	m.Preemptions = r.preemptions
	if r.total > 0 {
		m.IdleWaitingShare = r.idleWait / r.total
		m.AllocatedIdleShare = r.allocIdle / r.total
		m.GPUIdleShare = m.IdleWaitingShare + m.AllocatedIdleShare
		m.Fragmentation = r.fragInt / r.total * 100
	}
	m.MeanJCT, m.P95JCT = mean(jct), percentile(jct, 0.95)
	m.MeanWait = mean(waits)
	m.P95HighPriorityWait = percentile(hp, 0.95)
	m.Makespan = (lastEnd - first).Seconds()
	return res
}

// state is where the job ended the replay.
func (js *jobState) state() State {
	switch js.status {
	case finished:
		return Done
	case never:
		return Unschedulable
	case running:
		return Running
	}
	return Unfinished
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// percentile is the nearest-rank percentile of v (v is reordered).
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.SortFunc(v, cmp.Compare[float64])
	k := int(math.Ceil(p*float64(len(v)))) - 1
	return v[max(k, 0)]
}
