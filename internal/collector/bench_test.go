package collector_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sync/errgroup"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/cputime"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/harness/exporter"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// BenchmarkCollectorEndToEnd measures sustained samples/s from dcgm-exporter
// pages to rows in Postgres: N simulated exporters served over HTTP, scraped,
// parsed and COPYed by the real pipeline. In the same run the same rows go
// through a raw COPY (the store's binary COPY of already-built rows, one
// batch after another on one connection), and the ratio is reported. They
// then go through as many raw COPYs at once as the pipeline has writers:
// on a machine whose cores Postgres can fill alone, that is the database's
// own limit, and the pipeline, whose scraping shares those cores, stays
// well below it (collector_vs_parallel_copy_ratio).
//
// The exporters answer with prebuilt bytes (serveLikeDCGMExporter): on a
// cluster they run on the GPU nodes, so the CPU they take here is not the
// collector's, and the less of it they take the closer the figure is to
// what the collector does on its own cores. The bytes still cross the
// loopback, so sending them is counted.
//
// Two pages, one sub-benchmark each, so every figure says which it is:
//   - page=default-21-fields: dcgm-exporter's default counters (21 DCGM
//     fields per GPU, as the harness's exporter prints them);
//   - page=trimmed-5-fields: the same exporter run with a counters CSV (-f)
//     listing only the five fields the collector stores (DCGM_FI_DEV_GPU_UTIL,
//     DCGM_FI_PROF_GR_ENGINE_ACTIVE, DCGM_FI_PROF_SM_ACTIVE,
//     DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_POWER_USAGE): the recommended
//     deployment when the exporter serves only schedloop.
//
// Figures, on the default 21-field page: collector_samples_per_s beside
// collector_raw_copy_samples_per_s. The trimmed page reports the same
// figures with a _5field suffix. The collector's cost at cluster scale is
// BenchmarkCollectorCoresPer100kGPUs; this one says how close the pipeline
// comes to what Postgres takes in when they share two cores.
func BenchmarkCollectorEndToEnd(b *testing.B) {
	b.Run("page=default-21-fields", func(b *testing.B) { benchEndToEnd(b, nil, "") })
	b.Run("page=trimmed-5-fields", func(b *testing.B) { benchEndToEnd(b, dcgm.Metrics, "_5field") })
}

func benchEndToEnd(b *testing.B, fields []string, suffix string) {
	// 512 GPUs per scrape, 512,000 samples per pass. A pass starts with
	// nothing to write until the first batch (20,000 samples) is full and
	// ends with the last batches written after the last scrape; a pass
	// this long keeps those two edges to a few percent of it, so the
	// figure is the rate the pipeline sustains, which is what a collector
	// keeping up with a cluster needs.
	const nodes, rounds = 64, 1000
	var urls []string
	for n := range nodes {
		var page bytes.Buffer
		if err := exporter.New(fmt.Sprintf("node-%03d", n), exporter.BusyNode{}).WithCounters(fields...).Write(&page); err != nil {
			b.Fatal(err)
		}
		urls = append(urls, serveLikeDCGMExporter(b, page.Bytes()))
	}
	s := storetest.New(b)
	ctx := context.Background()
	start := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	if err := s.EnsureSamplePartitions(ctx, start, start.Add(48*time.Hour)); err != nil {
		b.Fatal(err)
	}
	truncate := func() {
		if _, err := s.Pool().Exec(ctx, `TRUNCATE gpu_samples`); err != nil {
			b.Fatal(err)
		}
	}
	// One inventory for all passes, written between them as the
	// collector writes it every few seconds: after the first pass the
	// GPUs are known, as they are in a collector that has been running.
	inventory := &collector.Inventory{Store: s}
	var pipeTime, rawTime, parallelTime, pipeCPU time.Duration
	total := 0
	for b.Loop() {
		truncate()
		var tick atomic.Int64
		// As cmd/collector wires them, the GPU inventory included; only the
		// buffer is larger, to hold a whole pass.
		scraper := &dcgm.ExporterScraper{Targets: dcgm.StaticTargets(urls), Inventory: inventory.Observe,
			Now: func() time.Time { return start.Add(time.Duration(tick.Load()) * time.Second) }}
		m := collector.NewMetrics()
		in, err := collector.NewIngester(s, collector.IngestOptions{BufferSamples: 1 << 22, Metrics: m})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		began, cpuBefore := time.Now(), cputime.Process(b)
		go func() { in.Run(runCtx); close(done) }()
		for r := range rounds {
			tick.Store(int64(r))
			samples, err := scraper.Collect(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n += len(samples)
			in.Add(samples)
		}
		// The rounds are back to back, as if 64 × 1,000 exporters were
		// scraped in one round: the pass ends with the round's flush.
		in.Flush()
		want := float64(n)
		for testutil.ToFloat64(m.Written) < want {
			time.Sleep(time.Millisecond)
		}
		pipeTime += time.Since(began)
		pipeCPU += cputime.Process(b) - cpuBefore
		cancel()
		<-done
		if err := inventory.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		// The raw COPY sends the rows the pipeline stored, read back
		// outside the timed part. Keeping every scraped sample alive
		// through the pass instead would have the garbage collector scan
		// them over and over, a cost the collector does not have.
		rows := storedSamples(b, s)
		if len(rows) != n {
			b.Fatalf("pipeline stored %d samples, scraped %d", len(rows), n)
		}
		total += len(rows)

		truncate()
		began = time.Now()
		for i := 0; i < len(rows); i += 20_000 {
			if _, err := s.CopyGPUSamples(ctx, rows[i:min(i+20_000, len(rows))]); err != nil {
				b.Fatal(err)
			}
		}
		rawTime += time.Since(began)

		// The pipeline runs DefaultWriters COPYs at once; the same rows
		// through as many raw COPYs at once say how much of the ratio
		// above is the writers' parallelism rather than the scrape path.
		truncate()
		began = time.Now()
		var copies errgroup.Group
		for w := range collector.DefaultWriters {
			copies.Go(func() error {
				for i := w * 20_000; i < len(rows); i += collector.DefaultWriters * 20_000 {
					if _, err := s.CopyGPUSamples(ctx, rows[i:min(i+20_000, len(rows))]); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err := copies.Wait(); err != nil {
			b.Fatal(err)
		}
		parallelTime += time.Since(began)
	}
	pipeRate := float64(total) / pipeTime.Seconds()
	rawRate := float64(total) / rawTime.Seconds()
	b.ReportMetric(pipeRate, "collector_samples_per_s"+suffix+"@samples/s")
	b.ReportMetric(rawRate, "collector_raw_copy_samples_per_s"+suffix+"@samples/s")
	// The process's CPU per sample, the exporters' side included: steadier
	// than a rate on a shared machine, so the figure to compare changes by.
	b.ReportMetric(float64(pipeCPU.Microseconds())/float64(total), "collector_process_cpu_us_per_sample"+suffix+"@us")
	parallelRate := float64(total) / parallelTime.Seconds()
	b.ReportMetric(parallelRate, "collector_parallel_copy_samples_per_s"+suffix+"@samples/s")
	b.ReportMetric(pipeRate/parallelRate, "collector_vs_parallel_copy_ratio"+suffix+"@ratio")
}

// storedSamples reads gpu_samples back in full.
func storedSamples(tb testing.TB, s *store.Store) []schedloop.GPUSample {
	tb.Helper()
	rows, err := s.Pool().Query(context.Background(), `SELECT ts, gpu_uuid, node, gpu_index, pod_namespace, pod_name, container,
		gpu_util, gr_engine_active, sm_active, fb_used_mib, power_w FROM gpu_samples ORDER BY ts, node, gpu_index`)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.GPUSample, error) {
		var g schedloop.GPUSample
		var idx int16
		var f [5]float32
		err := r.Scan(&g.Time, &g.GPUUUID, &g.Node, &idx, &g.PodNamespace, &g.PodName, &g.Container, &f[0], &f[1], &f[2], &f[3], &f[4])
		g.GPUIndex = int(idx)
		g.GPUUtil, g.GrEngineActive, g.SMActive, g.FBUsedMiB, g.PowerWatts = float64(f[0]), float64(f[1]), float64(f[2]), float64(f[3]), float64(f[4])
		return g, err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// BenchmarkCollectorCoresPer100kGPUs is the collector's own CPU at the scale
// of 100,000 GPUs: 12,500 8-GPU nodes, each page scraped every 15 s, is 833
// pages a second. The pipeline runs as collector serve wires it (each target
// on its own clock, the GPU inventory, ingest into Postgres, rollups) against
// 200 exporters with dcgm-exporter's default counters, served from a separate
// process so their CPU is not counted, at a 1 s interval. After a warm-up
// interval (connections up, series caches filled) the process's CPU over 10
// intervals, writes to Postgres included, is divided by the pages scraped
// in them: collector_cpu_us_per_page, and collector_cores_per_100k_gpus =
// that CPU per page times 833 pages/s. Postgres's own CPU is not the
// collector's and is not counted.
func BenchmarkCollectorCoresPer100kGPUs(b *testing.B) {
	const (
		nodes       = 200
		every       = time.Second
		measured    = 10
		pagesPerSec = 100_000 / 8 / 15.0
	)
	urls := startFarm(b, exporter.Farm{Nodes: nodes})
	s := storetest.New(b)
	var cpu time.Duration
	var pages float64
	for b.Loop() {
		pipe, err := collector.StartPipeline(context.Background(), collector.PipelineConfig{Store: s,
			Scraper: &dcgm.ExporterScraper{Targets: dcgm.StaticTargets(urls)}, ScrapeEvery: every})
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(every + every/2)
		received, before := testutil.ToFloat64(pipe.Metrics.Received), cputime.Process(b)
		time.Sleep(measured * every)
		n := testutil.ToFloat64(pipe.Metrics.Received) - received
		// The samples of the measured pages are written before the CPU is
		// read, so the COPYs are part of the figure.
		for testutil.ToFloat64(pipe.Metrics.Written) < received+n {
			time.Sleep(5 * time.Millisecond)
		}
		cpu += cputime.Process(b) - before
		pages += n / 8
		if err := pipe.Stop(); err != nil {
			b.Fatal(err)
		}
		if n < 0.9*nodes*measured*8 {
			b.Fatalf("%v samples in %d intervals of %d exporters: scraping fell behind", n, measured, nodes)
		}
	}
	perPage := cpu.Seconds() / pages
	b.ReportMetric(perPage*1e6, "collector_cpu_us_per_page@us")
	b.ReportMetric(perPage*pagesPerSec, "collector_cores_per_100k_gpus@cores")
}

var (
	hostileDuration = flag.Duration("hostile.duration", 5*time.Minute, "how long BenchmarkHostileTargets scrapes")
	hostileInterval = flag.Duration("hostile.interval", 15*time.Second, "BenchmarkHostileTargets's scrape interval")
)

// BenchmarkHostileTargets scrapes 100 ordinary exporters beside four hostile
// ones, all served from a separate process: an 11.7 MB OpenMetrics page
// (16,000 GPUs), a page over the body limit, one that trickles a byte a
// second and one that never answers, for -hostile.duration (5 minutes) at
// -hostile.interval (15 s). collector_hostile_target_good_scrape_ratio is
// the share of the ordinary targets' due scrapes, from the end of the first
// interval to the end, that delivered their page; a scrape is bounded by
// the interval, so a delivered page completed within it.
func BenchmarkHostileTargets(b *testing.B) {
	const ordinary = 100
	urls := startFarm(b, exporter.Farm{Nodes: ordinary, HugeOpenMetricsGPUs: 16_000, OverLimitBytes: dcgm.DefaultMaxBodyBytes + 8<<20,
		Trickle: true, Silent: true})
	every, duration := *hostileInterval, *hostileDuration
	due := int(duration/every) - 1
	if due < 1 {
		b.Fatalf("-hostile.duration %v holds fewer than two -hostile.interval %v", duration, every)
	}
	var ratios []float64
	for b.Loop() {
		var mu sync.Mutex
		delivered := map[string]int{}
		huge := 0
		var from, to time.Time
		scraper := &dcgm.ExporterScraper{Targets: dcgm.StaticTargets(urls), Metrics: dcgm.NewScrapeMetrics()}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		from = time.Now().Add(every)
		to = from.Add(time.Duration(due) * every)
		go func() {
			done <- scraper.Run(ctx, every, func(samples []schedloop.GPUSample) {
				now := time.Now()
				mu.Lock()
				defer mu.Unlock()
				if node := samples[0].Node; node == "huge-node" {
					huge++
				} else if !now.Before(from) && now.Before(to) {
					delivered[node]++
				}
			})
		}()
		time.Sleep(time.Until(to))
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		good := 0
		for n := range ordinary {
			good += min(delivered[fmt.Sprintf("node-%05d", n)], due)
		}
		mu.Unlock()
		ratios = append(ratios, float64(good)/float64(ordinary*due))
		b.Logf("ordinary targets: %d of %d due scrapes delivered; the huge OpenMetrics page delivered %d times", good, ordinary*due, huge)
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "collector_hostile_target_good_scrape_ratio@ratio")
}
