package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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

// The replay's pace: a trace minute takes two wall seconds; exporters are
// scraped every 5 trace seconds.
const (
	replaySpeed   = 30.0
	replayScrape  = 5 * time.Second // trace time
	replayMaxWall = 2 * time.Minute
)

// replayTrace leaves two free GPUs on each 8-GPU node (6-GPU jobs cannot
// share one), so the 4- and 8-GPU jobs arriving next wait for GPUs while
// four stand free; two of the jobs never touch their GPUs (util 0).
var replayTrace = []struct {
	name        string
	arrive, run int // trace minutes
	gpus        int
	util        float64
}{
	{"train-a", 0, 4, 6, 0.8},
	{"idle-b", 0, 4, 6, 0},
	{"train-c", 1, 2, 4, 0.6},
	{"idle-d", 1, 2, 8, 0},
	{"train-e", 2, 1, 2, 0.7},
}

// TestDashboardOnHarnessReplay fills the database the way production
// does: a trace played on the harness (simulated 8-GPU nodes with their
// dcgm-exporters, the stock kube-scheduler) while the collector's watcher,
// scraper, ingest and roller run against it on trace time. The three
// dashboard pages must then show what the test reads from the database:
// GPU time per idle category, the top idle holder, wait reasons, and a
// waiting pod's breakdown found by search.
func TestDashboardOnHarnessReplay(t *testing.T) {
	ctx := t.Context()
	url := storetest.URL(t)
	s := storetest.Open(t, url)
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c := harness.NewForTest(t, harness.Options{})
	nodeClock, err := harness.NewClock(replaySpeed)
	if err != nil {
		t.Fatal(err)
	}
	var specs []trace.Node
	for i := range 2 {
		specs = append(specs, trace.Node{Name: fmt.Sprintf("gpu-%d", i), GPUs: 8, GPUModel: "NVIDIA-H100-80GB-HBM3",
			GPUMemoryMiB: 81559, CPUMilli: 192000, MemoryMiB: 2 << 20})
	}
	nodes, err := c.AddNodes(ctx, specs, harness.NodeOptions{Clock: nodeClock, Workers: 8})
	if err != nil {
		t.Fatal(err)
	}
	// The stock profile, retrying unschedulable pods every wall second so
	// a pod waits for GPUs, not for the scheduler's backoff.
	schedCfg := fmt.Sprintf(harness.DefaultSchedulerConfig, c.Kubeconfig) + "podInitialBackoffSeconds: 1\npodMaxBackoffSeconds: 1\n"
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{Config: schedCfg}); err != nil {
		t.Fatal(err)
	}

	// Trace time starts two hours before the last whole hour, so the whole
	// replay lies in the dashboard's "last 24 hours" of wall time.
	clock, err := harness.NewClock(replaySpeed)
	if err != nil {
		t.Fatal(err)
	}
	epoch := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	origin := clock.WallAt(0)
	toTrace := func(wall time.Time) time.Time {
		return epoch.Add(time.Duration(float64(wall.Sub(origin)) * replaySpeed))
	}
	traceNow := func() time.Time { return toTrace(time.Now()) }

	// The collector, wired as `collector serve` wires it, on trace time.
	var urls []string
	for _, n := range specs {
		urls = append(urls, nodes.ExporterURL(n.Name))
	}
	pipe, err := collector.StartPipeline(context.Background(), collector.PipelineConfig{Store: s,
		Scraper:     &dcgm.ExporterScraper{Targets: dcgm.StaticTargets(urls), Now: traceNow},
		ScrapeEvery: clock.Wall(replayScrape), Ingest: collector.IngestOptions{FlushInterval: 50 * time.Millisecond},
		RollupEvery: 200 * time.Millisecond, RollupWindow: 2 * time.Hour, RollupNow: traceNow, InventoryEvery: 100 * time.Millisecond,
		Watch: &events.WatchOptions{Client: c.Client, Dynamic: c.Dynamic, FlushInterval: 100 * time.Millisecond, MapTime: toTrace}})
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

	var jobs []trace.Job
	for _, j := range replayTrace {
		jobs = append(jobs, trace.Job{Name: j.name, Arrival: time.Duration(j.arrive)*time.Minute + time.Second,
			Duration: time.Duration(j.run) * time.Minute, Members: 1, GPUs: j.gpus, Util: j.util, Outcome: trace.Succeeded})
	}
	p, err := player.New(c.Client, c.Dynamic, jobs, player.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	playCtx, cancel := context.WithTimeout(ctx, replayMaxWall)
	defer cancel()
	rep, err := p.Run(playCtx)
	if err != nil {
		t.Fatalf("play: %v", err)
	}

	// Scrape into the minute after the last job, store everything, and let
	// the roller make its last pass once every pod's end is recorded.
	lastEnd := toTrace(rep.Ended)
	waitUntil(t, "the minute after the last job", func(context.Context) (bool, error) {
		return traceNow().After(lastEnd.Truncate(time.Minute).Add(time.Minute + 30*time.Second)), nil
	})
	pipe.StopTelemetry()
	waitUntil(t, "every sample to be stored", func(context.Context) (bool, error) { return pipe.Stored(), nil })
	waitUntil(t, "every pod's end to be stored", func(ctx context.Context) (bool, error) {
		var done int
		err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pods WHERE finished_at IS NOT NULL AND phase = $1`,
			string(schedloop.PhaseSucceeded)).Scan(&done)
		return done == len(replayTrace), err
	})
	stopCollector()
	final := &collector.Roller{Store: s, Window: 2 * time.Hour, Lookback: 2 * time.Hour,
		Now: func() time.Time { return traceNow().Add(time.Hour) }}
	if err := final.Once(ctx); err != nil {
		t.Fatal(err)
	}

	d := serveInBrowser(t, url)

	// Page 1: GPU idle time over the last 24 hours.
	if err := chromedp.Do(d.browser, chromedp.Navigate(d.base+"/#/idle"),
		chromedp.SetValue(chromedp.CSS(`select[name=range]`), "-24h"),
		chromedp.Click(chromedp.CSS(`#filters button`)), d.ready("idle"),
		chromedp.WaitVisible(chromedp.CSS(`#heatmap .hrow[data-node]`))); err != nil {
		t.Fatalf("idle page: %v", err)
	}
	d.noError()
	from, _ := time.Parse(time.RFC3339, d.attr(`[data-testid=range]`, "data-from"))
	to, _ := time.Parse(time.RFC3339, d.attr(`[data-testid=range]`, "data-to"))
	want, err := s.GPUIdleBreakdown(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GPU-minutes in %s..%s: %+v", from, to, want)
	if want.BusyMinutes == 0 || want.AllocatedIdleMinutes == 0 || want.UnallocatedWaitingMinutes == 0 {
		t.Errorf("the replay should leave busy, held-idle and waiting GPU time in the database: %+v", want)
	}
	for id, minutes := range map[string]int64{"total-busy": want.BusyMinutes, "total-allocated_idle": want.AllocatedIdleMinutes,
		"total-unallocated_waiting": want.UnallocatedWaitingMinutes, "total-spare": want.SpareMinutes} {
		if got := d.number(`[data-testid=` + id + `]`); math.Abs(got-float64(minutes)/60) > 0.051 {
			t.Errorf("idle page %s = %v GPU-h, database %v", id, got, float64(minutes)/60)
		}
	}
	if got := d.number(`[data-testid=idle-share]`); math.Abs(got-100*want.IdleShare()) > 0.051 {
		t.Errorf("idle share on the page %v%%, database %v%%", got, 100*want.IdleShare())
	}
	if rows := d.count(`#heatmap .hrow[data-node]`); rows != len(specs) {
		t.Errorf("heatmap has %d node rows, want %d", rows, len(specs))
	}
	// The top idle holder, from the per-minute rollup: one of the jobs
	// that never touched its GPUs.
	var topNS, topName string
	var topIdle int64
	if err := s.Pool().QueryRow(ctx, `
		SELECT p.namespace, coalesce(j.name, p.name), count(*)
		FROM gpu_minutes g JOIN pods p ON p.namespace = g.pod_namespace AND p.name = g.pod_name
		LEFT JOIN jobs j ON j.uid = p.job_uid
		WHERE g.minute >= $1 AND g.minute < $2 AND greatest(g.gr_engine_active_avg, g.gpu_util_avg / 100) < $3
		GROUP BY 1, 2 ORDER BY 3 DESC, 2 LIMIT 1`, from, to, store.DefaultIdleThreshold).Scan(&topNS, &topName, &topIdle); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(topName, "idle-") {
		t.Errorf("the database's top idle holder is %s/%s; the trace's idle jobs are idle-b and idle-d", topNS, topName)
	}
	who := d.text(`[data-testid=holders] tbody tr td`)
	if got := d.number(`[data-testid=holders] tbody tr td[data-testid=holder-idle]`); !strings.HasPrefix(who, topNS+"/"+topName) ||
		math.Abs(got-float64(topIdle)/60) > 0.051 {
		t.Errorf("top idle holder on the page: %q with %v GPU-h; database: %s/%s with %v GPU-h", who, got, topNS, topName, float64(topIdle)/60)
	}
	d.shot("replay-idle.png")

	// Page 2: search a pod that waited for GPUs; read its wait breakdown
	// and the cluster-wide reasons.
	var waitedUID, waitedNS, waitedName string
	if err := s.Pool().QueryRow(ctx, `
		SELECT p.uid, p.namespace, p.name FROM pods p JOIN pod_wait_breakdown b ON b.pod_uid = p.uid
		WHERE b.category = $1 ORDER BY b.seconds DESC, p.name LIMIT 1`, string(schedloop.WaitInsufficientGPU)).
		Scan(&waitedUID, &waitedNS, &waitedName); err != nil {
		t.Fatalf("no pod waited for GPUs in the database: %v", err)
	}
	q := waitedNS + "/" + waitedName
	if err := chromedp.Do(d.browser, chromedp.Navigate(d.base+"/#/why"), d.ready("why"),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=search-input]`), q),
		chromedp.Click(chromedp.CSS(`#search button`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=story][data-uid="`+waitedUID+`"]`)), d.ready("why")); err != nil {
		t.Fatalf("why page, search %s: %v", q, err)
	}
	d.noError()
	bd, err := s.PodWaitBreakdown(ctx, waitedUID)
	if err != nil {
		t.Fatal(err)
	}
	if bd[string(schedloop.WaitInsufficientGPU)] < 30 {
		t.Errorf("pod %s: wait breakdown %v; the trace makes it wait over a trace minute for GPUs", q, bd)
	}
	for cat, sec := range bd {
		if got := d.number(`[data-testid=breakdown-` + cat + `]`); math.Abs(got-math.Round(sec)) > 0.5 {
			t.Errorf("why page: %s waited %v s for %s on the page, %v s in the database", q, got, cat, sec)
		}
	}
	rows, err := s.Pool().Query(ctx, `SELECT category, sum(seconds) FROM pod_wait_breakdown GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]float64{}
	for rows.Next() {
		var cat string
		var sec float64
		if err := rows.Scan(&cat, &sec); err != nil {
			t.Fatal(err)
		}
		reasons[cat] = sec
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for cat, sec := range reasons {
		if got := d.number(`[data-testid=reason-` + cat + `]`); math.Abs(got-sec/3600) > 0.051 {
			t.Errorf("top wait reasons: %s = %v pod-h on the page, %v in the database", cat, got, sec/3600)
		}
	}
	d.shot("replay-why.png")

	// Page 3: no profile was ever tuned here; the page says so, without error.
	if err := chromedp.Do(d.browser, chromedp.Navigate(d.base+"/#/profiles"), d.ready("profiles")); err != nil {
		t.Fatalf("profiles page: %v", err)
	}
	d.noError()
	d.shot("replay-profiles.png")
}

// waitUntil polls cond until it holds, for at most replayMaxWall.
func waitUntil(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, replayMaxWall, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
