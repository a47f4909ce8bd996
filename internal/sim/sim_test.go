package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/trace"
)

func cluster(nodes, gpus int) *Cluster {
	c := &Cluster{Depth: 1}
	for i := 0; i < nodes; i++ {
		c.Nodes = append(c.Nodes, scoring.NewNode(string(rune('a'+i)), "A100", gpus, 64000, 1<<20, "rack-0"))
	}
	return c
}

func job(name string, at, dur int, members, gpus int) Job {
	return Job{Name: name, Arrival: time.Duration(at) * time.Second, Duration: time.Duration(dur) * time.Second,
		Members: members, Request: scoring.Request{GPUs: gpus}, Util: 1}
}

func prio(j Job, p int32) Job   { j.Priority = p; return j }
func queue(j Job, q string) Job { j.Queue = q; return j }
func sec(s int) time.Duration   { return time.Duration(s) * time.Second }
func starts(r Result) []time.Duration {
	out := make([]time.Duration, len(r.Jobs))
	for i, o := range r.Jobs {
		out[i] = o.Start
	}
	return out
}

// checkStarts replays jobs and compares their start times with want.
func checkStarts(t *testing.T, c *Cluster, jobs []Job, cfg Config, want []time.Duration) Result {
	t.Helper()
	res, err := Run(c, jobs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := starts(res); !reflect.DeepEqual(got, want) {
		t.Errorf("starts = %v, want %v", got, want)
	}
	return res
}

func TestReplaySemantics(t *testing.T) {
	bin := scoring.Weights{scoring.TermBinPack: 1}
	tests := []struct {
		name   string
		c      *Cluster
		jobs   []Job
		cfg    Config
		starts []time.Duration
	}{
		{"gang waits for all its members", cluster(2, 8), []Job{job("a", 0, 100, 1, 4), job("b", 1, 10, 2, 8)},
			Config{Params: scoring.Params{Weights: bin}}, []time.Duration{0, sec(100)}},
		{"lone pods pass a waiting gang", cluster(2, 8),
			[]Job{job("a", 0, 100, 1, 4), job("b", 1, 10, 2, 8), job("c", 2, 10, 1, 8)},
			Config{Params: scoring.Params{Weights: bin}}, []time.Duration{0, sec(100), sec(2)}},
		{"queue limit holds the second job", cluster(2, 8),
			[]Job{queue(job("a", 0, 100, 1, 8), "q"), queue(job("b", 1, 10, 1, 8), "q"), job("c", 2, 10, 1, 8)},
			Config{Params: scoring.Params{Weights: bin, Queues: map[string]scoring.QueueLimit{"q": {MaxGPUs: 8}}}}, []time.Duration{0, sec(100), sec(2)}},
		{"higher priority goes first", cluster(1, 8),
			[]Job{job("a", 0, 100, 1, 8), job("low", 10, 10, 1, 8), prio(job("high", 20, 10, 1, 8), 100)},
			Config{Params: scoring.Params{Weights: bin}}, []time.Duration{0, sec(110), sec(100)}},
		{"preemption evicts the lower priority job", cluster(1, 8),
			[]Job{job("low", 0, 100, 1, 8), prio(job("high", 10, 10, 1, 8), 100)},
			Config{Params: scoring.Params{Weights: bin}, Preemption: true}, []time.Duration{sec(20), sec(10)}},
		// high's queue holds held's GPU at its limit of 1: evicting either
		// job would not admit high, so it waits for held to end.
		{"a job its queue refuses does not preempt", cluster(1, 8),
			[]Job{queue(job("other", 0, 100, 1, 7), "o"), queue(job("held", 0, 50, 1, 1), "q"), prio(queue(job("high", 10, 10, 1, 1), "q"), 100)},
			Config{Params: scoring.Params{Weights: bin, Queues: map[string]scoring.QueueLimit{"q": {MaxGPUs: 1}}}, Preemption: true},
			[]time.Duration{0, 0, sec(50)}},
		{"no preemption without it", cluster(1, 8),
			[]Job{job("low", 0, 100, 1, 8), prio(job("high", 10, 10, 1, 8), 100)},
			Config{Params: scoring.Params{Weights: bin}}, []time.Duration{0, sec(100)}},
		// b does not fit, so even with a timeout it reserves nothing.
		{"a gang that cannot fit holds nothing", cluster(2, 4),
			[]Job{job("a", 0, 100, 1, 4), job("b", 1, 10, 2, 4), job("c", 10, 10, 1, 4)},
			Config{Params: scoring.Params{Weights: bin, GangTimeout: sec(50)}}, []time.Duration{0, sec(100), sec(10)}},
		{"a zero timeout is the default timeout: a gang that cannot fit still holds nothing", cluster(2, 4),
			[]Job{job("a", 0, 100, 1, 4), job("b", 1, 10, 2, 4), job("c", 10, 10, 1, 4)},
			Config{Params: scoring.Params{Weights: bin}}, []time.Duration{0, sec(100), sec(10)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := checkStarts(t, tc.c, tc.jobs, tc.cfg, tc.starts)
			for i, o := range res.Jobs {
				if o.State != Done {
					t.Errorf("job %s ended %s", tc.jobs[i].Name, o.State)
				}
			}
		})
	}
}

// Each start comes StartLatency after the decision, the GPUs held from the
// decision: a job that finds room waits the latency, and one queued behind
// it waits for its predecessor's latency, run and its own latency.
func TestStartLatency(t *testing.T) {
	jobs := []Job{job("a", 0, 100, 1, 8), job("b", 1, 10, 1, 8), job("c", 2, 10, 1, 4)}
	bin := scoring.Weights{scoring.TermBinPack: 1}
	res := checkStarts(t, cluster(1, 8), jobs, Config{Params: scoring.Params{Weights: bin}, StartLatency: sec(5)},
		[]time.Duration{sec(5), sec(110), sec(125)})
	if got, want := res.Jobs[2].End, sec(135); got != want {
		t.Errorf("c ended at %v, want %v", got, want)
	}
	// a waits 5s, b 109s, c 123s; JCTs 105, 119, 133.
	if got, want := res.Metrics.MeanWait, (5.0+109+123)/3; math.Abs(got-want) > 1e-9 {
		t.Errorf("mean wait %v, want %v", got, want)
	}
	if got, want := res.Metrics.MeanJCT, (105.0+119+133)/3; math.Abs(got-want) > 1e-9 {
		t.Errorf("mean JCT %v, want %v", got, want)
	}
	// Zero latency is the replay without it.
	checkStarts(t, cluster(1, 8), jobs, Config{Params: scoring.Params{Weights: bin}}, []time.Duration{0, sec(100), sec(110)})
}

// With a spread, each job starts one of its latencies after its placement,
// the same one in every replay and whatever StartLatency says.
func TestStartLatencySpread(t *testing.T) {
	jobs := []Job{job("a", 0, 10, 1, 1), job("b", 0, 10, 1, 1), job("c", 0, 10, 1, 1), job("d", 0, 10, 1, 1)}
	spread := []time.Duration{sec(1), sec(2), sec(3)}
	cfg := Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}, StartLatency: sec(100), StartLatencySpread: spread}
	first, err := Run(cluster(1, 8), jobs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[time.Duration]bool{}
	for i, o := range first.Jobs {
		if !slices.Contains(spread, o.Start) {
			t.Errorf("%s started at %v, want one of %v", jobs[i].Name, o.Start, spread)
		}
		seen[o.Start] = true
	}
	if len(seen) < 2 {
		t.Errorf("every job started at the same latency %v: want them spread by name", first.Jobs[0].Start)
	}
	// Reversed input order: each job by its name, not its position.
	again, err := Run(cluster(1, 8), []Job{jobs[3], jobs[2], jobs[1], jobs[0]}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range again.Jobs {
		if want := first.Jobs[3-i].Start; o.Start != want {
			t.Errorf("%s started at %v in the second replay, %v in the first", jobs[3-i].Name, o.Start, want)
		}
	}
}

func TestPreemptedJobRestarts(t *testing.T) {
	res, err := Run(cluster(1, 8), []Job{job("low", 0, 100, 1, 8), prio(job("high", 10, 10, 1, 8), 100)},
		Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}, Preemption: true})
	if err != nil {
		t.Fatal(err)
	}
	if o := res.Jobs[0]; o.Preemptions != 1 || o.End != sec(120) {
		t.Errorf("low: %+v, want one preemption and a full rerun ending at 120s", o)
	}
	if res.Metrics.Preemptions != 1 {
		t.Errorf("metrics count %d preemptions", res.Metrics.Preemptions)
	}
}

// A job stopped by preemption arrives anew (scoring.QueueKey.Requeued):
// live its pods are recreated and new to the queue, so it waits behind a
// job that arrived before it was stopped, and behind one arriving at that
// same instant, though both arrived after it first did.
func TestPreemptedJobQueuesAnew(t *testing.T) {
	jobs := []Job{job("a-low", 0, 100, 1, 8), job("b-low", 5, 50, 1, 8), prio(job("high", 10, 20, 1, 8), 100), job("c-low", 10, 50, 1, 8)}
	res := checkStarts(t, cluster(1, 8), jobs, Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}, Preemption: true},
		[]time.Duration{sec(130), sec(30), sec(10), sec(80)})
	if o := res.Jobs[0]; o.Preemptions != 1 {
		t.Errorf("a-low: %+v, want one preemption", o)
	}
}

func TestMetrics(t *testing.T) {
	c := cluster(1, 2)
	half := job("half", 0, 100, 1, 1)
	half.Util = 0.5
	// The second job needs both GPUs and waits 100s while one GPU is free.
	res, err := Run(c, []Job{half, prio(job("both", 0, 100, 1, 2), 5), job("huge", 0, 1, 1, 4)},
		Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}, HighPriority: 5})
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	// both (priority 5) goes first: it starts at 0; half waits 100s.
	// GPU time: 200s x 2000 milli. Allocated idle: 0 for both, then half's
	// 500 milli for 100s; idle while waiting: 0 for the first 100s, 0 after
	// (nothing waits), so 50000 / 400000.
	want := Metrics{Jobs: 3, Completed: 2, Unschedulable: 1, GPUIdleShare: 0.125, AllocatedIdleShare: 0.125,
		MeanJCT: 150, P95JCT: 200, MeanWait: 50, P95HighPriorityWait: 0, Makespan: 200}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("metrics\n got %+v\nwant %+v", m, want)
	}
	// Reversed priorities: half starts first and both waits 100s with one
	// GPU free and 2000 milli wanted: 1000 x 100 idle while waiting.
	res, _ = Run(c, []Job{prio(half, 5), job("both", 0, 100, 1, 2)}, Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}, HighPriority: 5})
	if got := res.Metrics.IdleWaitingShare; math.Abs(got-0.25) > 1e-12 {
		t.Errorf("idle while waiting = %v, want 0.25", got)
	}
}

func TestWarmupJobsLoadTheClusterButAreNotMeasured(t *testing.T) {
	c := cluster(1, 8)
	cfg := Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}}
	// before holds 4 GPUs for 0..100; after wants all 8 from 50 and waits
	// to 100 with 4 GPUs free, then runs to 200.
	before, after := job("before", 0, 100, 1, 4), job("after", 50, 100, 1, 8)
	before.Warmup = true
	res, err := Run(c, []Job{before, after}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Only after is measured, and GPU time from its arrival: 150s x 8000
	// milli, of which 4000 x 50 idle while it waited.
	want := Metrics{Jobs: 1, Completed: 1, GPUIdleShare: 1.0 / 6, IdleWaitingShare: 1.0 / 6,
		MeanJCT: 150, P95JCT: 150, MeanWait: 50, P95HighPriorityWait: 50, Makespan: 150}
	if m := res.Metrics; math.Abs(m.GPUIdleShare-want.GPUIdleShare) > 1e-12 || math.Abs(m.IdleWaitingShare-want.IdleWaitingShare) > 1e-12 {
		t.Errorf("idle shares %v, %v, want %v", m.GPUIdleShare, m.IdleWaitingShare, want.GPUIdleShare)
	} else {
		m.GPUIdleShare, m.IdleWaitingShare = want.GPUIdleShare, want.IdleWaitingShare
		if !reflect.DeepEqual(m, want) {
			t.Errorf("metrics\n got %+v\nwant %+v", m, want)
		}
	}
	if res.Jobs[0].State != Done || res.Jobs[0].End != sec(100) || res.Jobs[1].FirstStart != sec(100) {
		t.Errorf("outcomes %+v: the warm-up job still runs and holds its GPUs", res.Jobs)
	}
	// Measured, before counts too, and GPU time from 0: 200s x 8000 milli.
	before.Warmup = false
	res, err = Run(c, []Job{before, after}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Metrics; m.Jobs != 2 || m.MeanJCT != 125 || math.Abs(m.IdleWaitingShare-0.125) > 1e-12 {
		t.Errorf("both measured: %+v", m)
	}
}

func TestReplayIsDeterministicOnPhilly(t *testing.T) {
	tj, err := trace.LoadJobs("../trace/testdata/philly/pollux_philly_head300.csv", trace.FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := trace.LoadInventory("../trace/testdata/philly/cluster_machine_list_head40.csv", trace.FormatAuto, nil, []int{1, 2, 4})
	if err != nil {
		t.Fatal(err)
	}
	c := NewCluster(inv)
	jobs := JobsFromTrace(tj)
	var first Result
	for i, cfg := range []Config{{Params: scoring.Params{Weights: scoring.DefaultWeights(), GangTimeout: sec(60)}}, {Params: scoring.Params{Weights: scoring.DefaultWeights(), GangTimeout: sec(60)}}} {
		res, err := Run(c, jobs, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Metrics.Completed+res.Metrics.Unschedulable != len(jobs) {
			t.Errorf("metrics %+v: every job must finish or be unschedulable", res.Metrics)
		}
		if i == 0 {
			first = res
		} else if !reflect.DeepEqual(first, res) {
			t.Error("the same replay gave two results")
		}
	}
	if first.Metrics.MeanJCT <= 0 || first.Metrics.GPUIdleShare <= 0 || first.Metrics.GPUIdleShare >= 1 {
		t.Errorf("implausible metrics %+v", first.Metrics)
	}
	if _, err := Run(c, jobs, Config{Params: scoring.Params{Weights: scoring.Weights{}}}); err == nil {
		t.Error("all-zero weights accepted")
	}
}

func TestInflateFGD(t *testing.T) {
	var pods []Job
	for i := 0; i < 100; i++ {
		j := job("p"+itoa(99-i), 0, 0, 1, 1)
		if i%4 == 0 {
			j.Request = scoring.Request{GPUs: 1, GPUMilli: 500}
		}
		pods = append(pods, j)
	}
	a := InflateFGD(pods, 80_000, 1.3, 42)
	b := InflateFGD(pods, 80_000, 1.3, 42)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different streams")
	}
	var total int64
	for _, p := range a {
		total += p.DemandMilli()
	}
	if total > 104_000 || total < 103_000 {
		t.Errorf("inflated demand %d, want just under 130%% of 80000", total)
	}
	if c := InflateFGD(pods, 80_000, 1.3, 43); reflect.DeepEqual(a[:100], c[:100]) {
		t.Error("a different seed gave the same order")
	}
	pts := Fill(cluster(10, 8), a, scoring.PolicyBestFit, nil, 0)
	if last := pts[len(pts)-1]; last.Allocated != 100 || At(pts, 50).Arrived < 50 {
		t.Errorf("filling 130%% demand of whole and half GPUs: %+v", last)
	}
}

// A replay told to stop once its first jobs have started stops at the
// last of their starts: those starts are a full replay's, the job running
// then is Running and the one still waiting Unfinished.
func TestReplayStopsOnceTheFirstJobsStarted(t *testing.T) {
	jobs := []Job{job("a", 0, 100, 1, 8), job("b", 0, 50, 1, 8), job("c", 10, 30, 1, 8)}
	cfg := Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}}
	full := checkStarts(t, cluster(1, 8), jobs, cfg, []time.Duration{0, sec(100), sec(150)})
	cfg.StopOnceStarted = 2
	res, err := Run(cluster(1, 8), jobs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []Outcome{full.Jobs[0], {State: Running, Start: sec(100)}, {State: Unfinished}}
	for i := range want {
		got := res.Jobs[i]
		if got.State != want[i].State || got.Start != want[i].Start || got.End != want[i].End {
			t.Errorf("%s: %s from %v to %v, want %s from %v to %v", jobs[i].Name, got.State, got.Start, got.End, want[i].State, want[i].Start, want[i].End)
		}
	}
}

// cancelOnFirstEnd cancels its context when the replay's first job ends
// and counts the ends it hears.
type cancelOnFirstEnd struct {
	cancel context.CancelFunc
	ends   int
}

func (c *cancelOnFirstEnd) Predict(j *Job, _ time.Duration) time.Duration { return j.Duration }
func (c *cancelOnFirstEnd) Observe(*Job, time.Duration, time.Duration) {
	c.ends++
	c.cancel()
}

// A replay whose context is cancelled midway stops there: it returns the
// context's error, not a result, having played only the instants up to
// its next look at the context.
func TestReplayStopsWhenCancelled(t *testing.T) {
	var jobs []Job
	for i := 0; i < 20*cancelCheckEvery; i++ {
		jobs = append(jobs, job(fmt.Sprintf("j%d", i), i, 10, 1, 8))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &cancelOnFirstEnd{cancel: cancel}
	binpack := scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}
	_, err := RunContext(ctx, cluster(1, 8), jobs, Config{Params: binpack, Predictor: p})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled replay returned %v, want context.Canceled", err)
	}
	// Each instant ends at most one job here (one node, one job at a time).
	if p.ends == 0 || p.ends > cancelCheckEvery {
		t.Errorf("%d of %d jobs ended before the replay stopped, want 1..%d", p.ends, len(jobs), cancelCheckEvery)
	}
	if _, err := RunContext(ctx, cluster(1, 8), jobs[:1], Config{Params: binpack}); !errors.Is(err, context.Canceled) {
		t.Errorf("replay under a cancelled context returned %v, want context.Canceled", err)
	}
}
