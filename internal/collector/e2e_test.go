package collector_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/player"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
	"github.com/schedloop/schedloop/internal/trace"
)

// The show test's cluster and pace. At speed 30 a trace minute takes two
// wall seconds; the exporters are scraped every 5 trace seconds.
const (
	showSpeed    = 30.0
	showNodes    = 3
	showGPUs     = 8
	showScrape   = 5 * time.Second // trace time
	showMaxWall  = 2 * time.Minute
	showEpochStr = "2026-03-02T09:00:00Z"
)

// Tolerances, in trace time, and why:
//   - showLag: the player, the watcher and the exporters each observe a pod's
//     transitions through their own watch of the apiserver or the runner's
//     memory; on a loaded 2-core machine those readings differ by up to a
//     few hundred wall milliseconds, 0.3 s wall = 9 trace s here.
//   - showEps: a GPU-minute's state is decided by the samples in it, taken
//     every showScrape, so a transition is known to the stored side only to
//     within one scrape interval on top of the observation lag.
var (
	showLag = time.Duration(0.3 * showSpeed * float64(time.Second))
	showEps = showScrape + showLag
)

// showJob is one row of the show trace: a single pod arriving one second
// into trace minute arrive, running for run minutes on gpus GPUs at util.
type showJob struct {
	name        string
	arrive, run int
	gpus        int
	util        float64
}

// showTrace fills 24 GPUs: some jobs start at once, some wait for GPUs that
// other jobs hold (some of those idle), and the cluster drains at the end.
var showTrace = []showJob{
	{"a", 1, 3, 8, 0.8}, {"b", 1, 3, 8, 0}, {"c", 1, 2, 4, 0.6}, {"d", 1, 4, 2, 0.7}, {"e", 1, 2, 1, 0},
	{"f", 2, 2, 4, 0.5}, {"g", 2, 2, 2, 0.9}, {"h", 2, 1, 1, 0.3},
	{"i", 3, 2, 8, 0.7}, {"j", 3, 1, 2, 0},
	{"k", 4, 2, 4, 0.8}, {"l", 4, 1, 4, 0}, {"m", 4, 3, 1, 0.6}, {"n", 4, 2, 2, 0.4},
	{"o", 5, 2, 8, 0.9}, {"p", 5, 1, 2, 0}, {"q", 5, 1, 1, 0.5},
	{"r", 6, 2, 4, 0.6}, {"s", 6, 2, 2, 0}, {"t", 6, 2, 1, 0.7},
	{"u", 7, 1, 2, 0.8}, {"v", 7, 1, 4, 0.5}, {"w", 7, 1, 1, 0}, {"x", 7, 1, 8, 0.6},
}

// TestShowPlayedTraceIsAnsweredByTheDatabase plays a trace on the harness
// (simulated 8-GPU nodes with their dcgm-exporters, the stock
// kube-scheduler) while the real collector runs against it: the cluster
// watcher, the exporter scraper, the ingest buffer and the roller, all on
// trace time. Then the database must answer, for every pod, when it was
// created, scheduled, started and finished, why it waited and for how long,
// where it ran (node and GPU UUIDs) and how busy those GPUs were; and the
// idle GPU-minutes by category must equal what an independent model of the
// same run (the player's report plus the exporters' allocation rule) gives.
func TestShowPlayedTraceIsAnsweredByTheDatabase(t *testing.T) {
	ctx := t.Context()
	c := harness.NewForTest(t, harness.Options{})
	s := storetest.New(t)

	nodeClock, err := harness.NewClock(showSpeed)
	if err != nil {
		t.Fatal(err)
	}
	var specs []trace.Node
	for i := range showNodes {
		specs = append(specs, trace.Node{Name: fmt.Sprintf("gpu-%d", i), GPUs: showGPUs, GPUModel: "NVIDIA-H100-80GB-HBM3",
			GPUMemoryMiB: 81559, CPUMilli: 192000, MemoryMiB: 2 << 20})
	}
	nodes, err := c.AddNodes(ctx, specs, harness.NodeOptions{Clock: nodeClock, Workers: 8})
	if err != nil {
		t.Fatal(err)
	}
	// The stock profile, retrying unschedulable pods after one wall second
	// (the floor) so a pod waits for GPUs, not for the scheduler's backoff.
	schedCfg := fmt.Sprintf(harness.DefaultSchedulerConfig, c.Kubeconfig) + "podInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 1\n"
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{Config: schedCfg}); err != nil {
		t.Fatal(err)
	}

	// Trace time: minute k of the trace is minute k after epoch in the
	// database, whatever wall time it is.
	clock, err := harness.NewClock(showSpeed)
	if err != nil {
		t.Fatal(err)
	}
	epoch, _ := time.Parse(time.RFC3339, showEpochStr)
	origin := clock.WallAt(0)
	toTrace := func(wall time.Time) time.Time {
		return epoch.Add(time.Duration(float64(wall.Sub(origin)) * showSpeed))
	}
	traceNow := func() time.Time { return toTrace(time.Now()) }

	// The collector, wired as serve wires it, on trace time.
	var urls []string
	for _, n := range specs {
		urls = append(urls, nodes.ExporterURL(n.Name))
	}
	logger := slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pipe, err := collector.StartPipeline(context.Background(), collector.PipelineConfig{Store: s,
		Scraper:     &dcgm.ExporterScraper{Targets: dcgm.StaticTargets(urls), Now: traceNow},
		ScrapeEvery: clock.Wall(showScrape), Ingest: collector.IngestOptions{FlushInterval: 50 * time.Millisecond},
		RollupEvery: 200 * time.Millisecond, RollupWindow: 2 * time.Hour, RollupNow: traceNow, InventoryEvery: 100 * time.Millisecond,
		Watch:  &events.WatchOptions{Client: c.Client, Dynamic: c.Dynamic, FlushInterval: 100 * time.Millisecond, MapTime: toTrace},
		Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	stopCollector := func() {
		if err := pipe.Stop(); err != nil {
			t.Errorf("collector pipeline: %v", err)
		}
	}
	t.Cleanup(stopCollector)
	waitUntil(t, "the watcher's informers to list", func(context.Context) (bool, error) { return pipe.Ready() == nil, nil })

	// Play.
	var jobs []trace.Job
	for _, j := range showTrace {
		jobs = append(jobs, trace.Job{Name: j.name, Arrival: time.Duration(j.arrive)*time.Minute + time.Second,
			Duration: time.Duration(j.run) * time.Minute, Members: 1, GPUs: j.gpus, Util: j.util, Outcome: trace.Succeeded})
	}
	p, err := player.New(c.Client, c.Dynamic, jobs, player.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	playCtx, cancel := context.WithTimeout(ctx, showMaxWall)
	defer cancel()
	began := time.Now()
	rep, err := p.Run(playCtx)
	if err != nil {
		t.Fatalf("play: %v", err)
	}
	t.Logf("%d jobs played in %v wall", len(rep.Jobs), time.Since(began).Round(time.Millisecond))

	// Keep scraping into the minute after the last end, so the last minute
	// with samples has no pod in it, then let everything reach Postgres.
	lastEnd := toTrace(rep.Ended)
	waitUntil(t, "the minute after the last job", func(context.Context) (bool, error) {
		return traceNow().After(lastEnd.Truncate(time.Minute).Add(time.Minute + 30*time.Second)), nil
	})
	pipe.StopTelemetry()
	waitUntil(t, "every sample to be stored", func(context.Context) (bool, error) { return pipe.Stored(), nil })
	pods := map[string]podRow{} // by name
	defer func() {
		if t.Failed() {
			for _, r := range pods {
				t.Logf("stored pod %s: phase %s node %q created %v scheduled %v started %v finished %v", r.name, r.phase, r.node,
					r.created, fmtT(r.scheduled), fmtT(r.started), fmtT(r.finished))
			}
		}
	}()
	waitUntil(t, "every pod's end to be stored", func(ctx context.Context) (bool, error) {
		rows, err := readPods(ctx, s)
		if err != nil {
			return false, err
		}
		done := 0
		for _, r := range rows {
			pods[r.name] = r
			if r.finished != nil && r.phase == string(schedloop.PhaseSucceeded) {
				done++
			}
		}
		return done == len(showTrace), nil
	})
	stopCollector()
	// One last pass over everything, as the roller makes once the last
	// minute has closed.
	final := &collector.Roller{Store: s, Window: 2 * time.Hour, Lookback: 2 * time.Hour,
		Now: func() time.Time { return traceNow().Add(time.Hour) }}
	if err := final.Once(ctx); err != nil {
		t.Fatal(err)
	}

	// Per pod.
	model := newShowModel(rep, toTrace)
	waited := 0
	for _, r := range rep.Jobs {
		name := r.Name + "-0"
		row, ok := pods[name]
		if !ok {
			t.Errorf("pod %s: not in the database", name)
			continue
		}
		j := model.jobs[r.Name]
		if row.scheduled == nil || row.started == nil || row.finished == nil {
			t.Errorf("pod %s: created %v scheduled %v started %v finished %v; want all four", name, row.created, row.scheduled, row.started, row.finished)
			continue
		}
		if row.created.After(*row.scheduled) || row.scheduled.After(*row.started) || row.started.After(*row.finished) {
			t.Errorf("pod %s: created %v, scheduled %v, started %v, finished %v are out of order", name,
				row.created, row.scheduled, row.started, row.finished)
		}
		for _, c := range []struct {
			what      string
			got, want time.Time
		}{{"created", row.created, j.submitted}, {"started", *row.started, j.start}, {"finished", *row.finished, j.end}} {
			if d := c.got.Sub(c.want).Abs(); d > showLag {
				t.Errorf("pod %s: %s at %s, the player saw %s (%v apart, tolerance %v)", name, c.what,
					c.got.Format(time.TimeOnly), c.want.Format(time.TimeOnly), d, showLag)
			}
		}
		if d := row.finished.Sub(*row.started) - r.Job.Duration; d.Abs() > showLag {
			t.Errorf("pod %s: ran %v, the trace says %v", name, row.finished.Sub(*row.started), r.Job.Duration)
		}
		if row.node != r.Nodes[0] || row.gpus != r.Job.GPUs {
			t.Errorf("pod %s: node %q with %d GPUs; it ran on %q with %d", name, row.node, row.gpus, r.Nodes[0], r.Job.GPUs)
		}

		// Why it waited, and for how long.
		reasons, err := s.PodWaitBreakdown(ctx, row.uid)
		if err != nil {
			t.Fatal(err)
		}
		total := 0.0
		for _, sec := range reasons {
			total += sec
		}
		wantWait := j.start.Sub(j.submitted)
		if d := time.Duration(total*float64(time.Second)) - wantWait; d.Abs() > 2*showLag {
			t.Errorf("pod %s: waited %.1fs by reason %v; the player saw it wait %v", name, total, reasons, wantWait)
		}
		if wantWait > time.Minute {
			// Longer than the scheduler's retry: it was turned away for GPUs.
			waited++
			if reasons[string(schedloop.WaitInsufficientGPU)] < 1 {
				t.Errorf("pod %s waited %v for GPUs; stored reasons %v lack %s", name, wantWait, reasons, schedloop.WaitInsufficientGPU)
			}
		}
		if sec := reasons[string(schedloop.WaitInsufficientGPU)]; time.Duration(sec*float64(time.Second)) > wantWait+showLag {
			t.Errorf("pod %s: %.1fs waiting for GPUs stored; the player saw it wait %v in all", name, sec, wantWait)
		}

		// Where it ran and how busy its GPUs were.
		gpus, err := s.PodGPUs(ctx, row.uid)
		if err != nil {
			t.Fatal(err)
		}
		if len(gpus) != r.Job.GPUs {
			t.Errorf("pod %s: stored on %d GPUs, asked for %d: %+v", name, len(gpus), r.Job.GPUs, gpus)
		}
		for _, g := range gpus {
			if g.Node != r.Nodes[0] || !slices.Contains(gpuUUIDs(r.Nodes[0]), g.GPUUUID) {
				t.Errorf("pod %s: GPU %s on %s; it ran on %s, whose GPUs are %v", name, g.GPUUUID, g.Node, r.Nodes[0], gpuUUIDs(r.Nodes[0]))
			}
			runMin := int(r.Job.Duration / time.Minute)
			if g.Minutes < runMin-1 || g.Minutes > runMin+1 {
				t.Errorf("pod %s: held GPU %s for %d minutes; it ran %d", name, g.GPUUUID, g.Minutes, runMin)
			}
			// A minute at either end may be shared with the GPU's previous
			// or next holder (or with no holder): one minute's worth of slack.
			u := r.Job.Util
			slack := u/float64(max(g.Minutes, 1)) + 0.01
			if r.Job.Util == 0 {
				slack = 0.9 / float64(max(g.Minutes, 1)) // at most one minute shared with a busy neighbour
			}
			if math.Abs(g.GrEngineActiveAvg-u) > slack {
				t.Errorf("pod %s: GPU %s engine activity %.3f while it ran; its profile says %.2f (slack %.3f)", name, g.GPUUUID, g.GrEngineActiveAvg, u, slack)
			}
		}
	}
	if waited < 3 {
		t.Errorf("%d pods waited for GPUs; the trace is built to make several wait", waited)
	}

	// GPU-minutes by category, against the model.
	var first, last time.Time
	var rows int64
	if err := s.Pool().QueryRow(ctx, `SELECT min(minute), max(minute), count(*) FROM gpu_minutes`).Scan(&first, &last, &rows); err != nil {
		t.Fatal(err)
	}
	minutes := int64(last.Sub(first)/time.Minute) + 1
	if rows != minutes*showNodes*showGPUs {
		t.Errorf("%d GPU-minutes stored over %d minutes; want every one of %d GPUs in every minute (%d)", rows, minutes,
			showNodes*showGPUs, minutes*showNodes*showGPUs)
	}
	got, err := s.GPUIdleBreakdown(ctx, epoch.Truncate(time.Hour), epoch.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want, tol := model.breakdown(first, last)
	t.Logf("GPU-minutes %s..%s: stored busy %d, allocated_idle %d, unallocated_waiting %d, spare %d",
		first.Format(time.TimeOnly), last.Format(time.TimeOnly), got.BusyMinutes, got.AllocatedIdleMinutes, got.UnallocatedWaitingMinutes, got.SpareMinutes)
	t.Logf("model:      busy %.2f±%d, allocated_idle %.2f±%d, unallocated_waiting %.2f±%d, spare %.2f±%d",
		want.busy, tol.busy, want.idle, tol.idle, want.waiting, tol.waiting, want.spare, tol.spare)
	if got.Total() != rows {
		t.Errorf("categories add up to %d GPU-minutes; %d are stored", got.Total(), rows)
	}
	for _, c := range []struct {
		name string
		got  int64
		want float64
		tol  int
	}{
		{"busy", got.BusyMinutes, want.busy, tol.busy},
		{"allocated_idle", got.AllocatedIdleMinutes, want.idle, tol.idle},
		{"unallocated_waiting", got.UnallocatedWaitingMinutes, want.waiting, tol.waiting},
		{"spare", got.SpareMinutes, want.spare, tol.spare},
	} {
		if math.Abs(float64(c.got)-c.want) > float64(c.tol)+1e-9 {
			t.Errorf("%s: %d GPU-minutes stored, the model says %.0f ± %d", c.name, c.got, c.want, c.tol)
		}
	}
	if got.AllocatedIdleMinutes == 0 || got.UnallocatedWaitingMinutes == 0 || got.BusyMinutes == 0 {
		t.Errorf("the trace should produce busy, held-idle and waiting GPU time: %+v", got)
	}

	// The inventory the scrapes found.
	stored, err := s.ListGPUs(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != showNodes*showGPUs {
		t.Errorf("gpus table has %d GPUs; want %d", len(stored), showNodes*showGPUs)
	}
	for _, g := range stored {
		if g.UUID != gpuUUIDs(g.Node)[g.Index] || g.Model != "NVIDIA H100 80GB HBM3" {
			t.Errorf("gpus table: %+v; want UUID %s, model NVIDIA H100 80GB HBM3", g, gpuUUIDs(g.Node)[g.Index])
		}
	}
}

// tWriter sends a component's warnings to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func fmtT(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.TimeOnly)
}

// waitUntil polls cond for up to 30 wall seconds: far more than anything
// here takes once the trace has played.
func waitUntil(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// gpuUUIDs are the UUIDs the harness gives a node's GPUs, by index.
func gpuUUIDs(node string) []string {
	out := make([]string, showGPUs)
	for i := range out {
		out[i] = "GPU-" + uuid.NewSHA1(uuid.NameSpaceOID, []byte(node+"/"+strconv.Itoa(i))).String()
	}
	return out
}

type podRow struct {
	uid, name, node, phase       string
	gpus                         int
	created                      time.Time
	scheduled, started, finished *time.Time
}

func readPods(ctx context.Context, s *store.Store) ([]podRow, error) {
	rows, err := s.Pool().Query(ctx, `SELECT uid, name, node, phase, gpus, created_at, scheduled_at, started_at, finished_at FROM pods`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []podRow
	for rows.Next() {
		var r podRow
		if err := rows.Scan(&r.uid, &r.name, &r.node, &r.phase, &r.gpus, &r.created, &r.scheduled, &r.started, &r.finished); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// showModel is the run as the player saw it, replayed through the
// exporters' allocation rule (the runner gives a pod the lowest free GPU
// indices of its node) on trace time.
type showModel struct {
	jobs map[string]*modelJob
	// holds per GPU (node/index), in time order.
	holds map[string][]hold
}

type modelJob struct {
	submitted, start, end time.Time
	gpus                  int
	util                  float64
}

type hold struct {
	from, to time.Time
	util     float64
}

func newShowModel(rep player.Report, toTrace func(time.Time) time.Time) *showModel {
	m := &showModel{jobs: map[string]*modelJob{}, holds: map[string][]hold{}}
	type change struct {
		at    time.Time
		start bool
		job   string
		node  string
	}
	var changes []change
	for _, r := range rep.Jobs {
		j := &modelJob{submitted: toTrace(r.Submitted), start: toTrace(r.FirstStart), end: toTrace(r.Finished), gpus: r.Job.GPUs, util: r.Job.Util}
		m.jobs[r.Name] = j
		changes = append(changes, change{j.start, true, r.Name, r.Nodes[0]}, change{j.end, false, r.Name, r.Nodes[0]})
	}
	// Ends before starts at the same instant: a GPU is freed before it is reused.
	sort.SliceStable(changes, func(a, b int) bool {
		if !changes[a].at.Equal(changes[b].at) {
			return changes[a].at.Before(changes[b].at)
		}
		return !changes[a].start && changes[b].start
	})
	owner := map[string][]string{} // node -> job holding each index
	held := map[string][]int{}     // job -> indices
	for _, c := range changes {
		if owner[c.node] == nil {
			owner[c.node] = make([]string, showGPUs)
		}
		j := m.jobs[c.job]
		if !c.start {
			for _, i := range held[c.job] {
				owner[c.node][i] = ""
				key := c.node + "/" + strconv.Itoa(i)
				hs := m.holds[key]
				hs[len(hs)-1].to = c.at
			}
			continue
		}
		for i := range owner[c.node] {
			if len(held[c.job]) == j.gpus {
				break
			}
			if owner[c.node][i] == "" {
				owner[c.node][i] = c.job
				held[c.job] = append(held[c.job], i)
				key := c.node + "/" + strconv.Itoa(i)
				m.holds[key] = append(m.holds[key], hold{from: c.at, util: j.util})
			}
		}
	}
	return m
}

type categories struct{ busy, idle, waiting, spare float64 }
type tolerances struct{ busy, idle, waiting, spare int }

// breakdown labels every GPU-minute in [first, last] as the rollup defines
// the states: a GPU-minute belongs to whoever held the GPU for most of it
// (a pod, or nobody); a held one is busy when its time-weighted activity
// reaches the idle threshold; of the free ones, as many as the GPUs that
// pods were waiting for at the minute's start are "unallocated while work
// waits", the rest spare.
//
// The tolerance of each category is the number of GPU-minutes whose label
// would change if some transition in them moved by showEps (the scrape
// interval plus observation lag): a holder decided by less than 2*showEps of
// the minute, or an activity within showEps worth of the threshold. Waiting
// demand is ambiguous only on one side: the stored creation can only be
// later than the player's submission (the player stamps before it
// creates), and the stored binding only earlier than the start the player
// saw (a pod is bound before it runs), each by up to showLag. Every other
// GPU-minute must be labelled exactly as the model labels it.
func (m *showModel) breakdown(first, last time.Time) (categories, tolerances) {
	var want categories
	var tol tolerances
	eps := showEps.Seconds() / 60
	var keys []string
	for n := range showNodes {
		for i := range showGPUs {
			keys = append(keys, fmt.Sprintf("gpu-%d/%d", n, i))
		}
	}
	for mm := first; !mm.After(last); mm = mm.Add(time.Minute) {
		end := mm.Add(time.Minute)
		free, ambFree := 0, 0
		for _, k := range keys {
			free0, shares, active := 1.0, []float64{}, 0.0
			for _, h := range m.holds[k] {
				from, to := maxT(h.from, mm), minT(h.to, end)
				if !to.After(from) {
					continue
				}
				sh := to.Sub(from).Seconds() / 60
				shares = append(shares, sh)
				free0 -= sh
				active += sh * h.util
			}
			shares = append(shares, max(free0, 0))
			heldShare := 0.0
			for _, sh := range shares[:len(shares)-1] {
				heldShare = max(heldShare, sh)
			}
			sorted := slices.Clone(shares)
			slices.Sort(sorted)
			ambiguous := len(sorted) > 1 && sorted[len(sorted)-1]-sorted[len(sorted)-2] < 2*eps
			if heldShare > free0 {
				busy := active >= store.DefaultIdleThreshold
				ambBusy := math.Abs(active-store.DefaultIdleThreshold) < eps
				if busy {
					want.busy++
				} else {
					want.idle++
				}
				if ambiguous || ambBusy {
					tol.busy++
					tol.idle++
				}
				if ambiguous {
					ambFree++
				}
				continue
			}
			free++
			if ambiguous {
				ambFree++
				tol.busy++
				tol.idle++
			}
		}
		pending, ambPending := 0, 0
		for _, j := range m.jobs {
			if !j.submitted.After(mm) && j.start.After(mm) {
				pending += j.gpus
			}
			subAmb := !j.submitted.After(mm) && j.submitted.Add(showLag).After(mm)
			startAmb := j.start.After(mm) && !j.start.Add(-showLag).After(mm)
			if subAmb || startAmb {
				ambPending += j.gpus
			}
		}
		w := min(free, pending)
		want.waiting += float64(w)
		want.spare += float64(free - w)
		tol.waiting += ambFree + ambPending
		tol.spare += ambFree + ambPending
	}
	return want, tol
}

func maxT(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minT(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
