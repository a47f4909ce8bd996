package collector_test

import (
	"bytes"
	"context"
	"fmt"
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
// Headline metrics, on the default 21-field page: collector_samples_per_s
// and collector_vs_copy_ratio. The trimmed page reports the same figures
// with a _5field suffix.
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
	b.ReportMetric(pipeRate/rawRate, "collector_vs_copy_ratio"+suffix+"@ratio")
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
