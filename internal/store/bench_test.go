package store_test

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// BenchmarkBulkIngest compares the store's sample ingest with the fastest
// plain COPY FROM STDIN we can hand Postgres for the same rows: text already
// encoded before the clock starts, so the baseline pays no client-side cost
// and the ratio is conservative. Both write into the same partitions with
// the same indexes, alternating within each iteration so machine noise hits
// both alike.
//
// Headline metrics (see scripts/benchreport): store_ingest_rows_per_s and
// store_copy_ratio (store ÷ raw COPY).
func BenchmarkBulkIngest(b *testing.B) {
	s := storetest.New(b)
	const rows = 200_000
	start := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	samples := storetest.Samples(rows, 1000, start, 15*time.Second)
	if err := s.EnsureSamplePartitions(ctx, start, samples[rows-1].Time); err != nil {
		b.Fatal(err)
	}
	text := encodeCopyText(samples)
	truncate := func() {
		if _, err := s.Pool().Exec(ctx, `TRUNCATE gpu_samples`); err != nil {
			b.Fatal(err)
		}
	}

	var storeTime, rawTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		truncate()
		b.StartTimer()
		began := time.Now()
		if n, err := s.CopyGPUSamples(ctx, samples); err != nil || n != rows {
			b.Fatalf("store ingest: %d rows, %v", n, err)
		}
		storeTime += time.Since(began)

		b.StopTimer()
		truncate()
		conn, err := s.Pool().Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		began = time.Now()
		tag, err := conn.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(text),
			`COPY gpu_samples (ts, gpu_uuid, node, gpu_index, pod_namespace, pod_name, container,
			 gpu_util, gr_engine_active, sm_active, fb_used_mib, power_w) FROM STDIN`)
		rawTime += time.Since(began)
		conn.Release()
		if err != nil || tag.RowsAffected() != rows {
			b.Fatalf("raw COPY: %d rows, %v", tag.RowsAffected(), err)
		}
	}
	b.StopTimer()
	storeRate := float64(rows*b.N) / storeTime.Seconds()
	rawRate := float64(rows*b.N) / rawTime.Seconds()
	b.ReportMetric(storeRate, "store_ingest_rows_per_s@rows/s")
	b.ReportMetric(rawRate, "raw_copy_rows_per_s@rows/s")
	b.ReportMetric(storeRate/rawRate, "store_copy_ratio@ratio")
}

// encodeCopyText renders samples in COPY's default text format. The values
// contain no tabs, backslashes or newlines, so no escaping is needed.
func encodeCopyText(samples []schedloop.GPUSample) []byte {
	var buf bytes.Buffer
	f := func(v float64) string { return strconv.FormatFloat(float64(float32(v)), 'g', -1, 32) }
	for _, r := range samples {
		buf.WriteString(r.Time.Format(time.RFC3339Nano))
		for _, field := range []string{r.GPUUUID, r.Node, strconv.Itoa(r.GPUIndex), r.PodNamespace, r.PodName, r.Container,
			f(r.GPUUtil), f(r.GrEngineActive), f(r.SMActive), f(r.FBUsedMiB), f(r.PowerWatts)} {
			buf.WriteByte('\t')
			buf.WriteString(field)
		}
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// BenchmarkOnceIngest measures what exactly-once storage costs at the
// collector's batch size: 200,000 samples as ten 20,000-sample batches,
// each through CopyGPUSampleChunks (one autocommit COPY) and through
// CopyGPUSampleChunksOnce (a transaction that records the batch id, COPYs,
// forgets expired ids and commits), alternating within each iteration.
//
// Headline metric: store_once_ratio (once ÷ plain rows/s).
func BenchmarkOnceIngest(b *testing.B) {
	s := storetest.New(b)
	const rows, batch = 200_000, 20_000
	start := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	samples := storetest.Samples(rows, 1000, start, 15*time.Second)
	if err := s.EnsureSamplePartitions(ctx, start, samples[rows-1].Time); err != nil {
		b.Fatal(err)
	}
	truncate := func() {
		if _, err := s.Pool().Exec(ctx, `TRUNCATE gpu_samples, ingested_batches`); err != nil {
			b.Fatal(err)
		}
	}
	var plainTime, onceTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		truncate()
		b.StartTimer()
		began := time.Now()
		for j := 0; j < rows; j += batch {
			if _, err := s.CopyGPUSampleChunks(ctx, [][]schedloop.GPUSample{samples[j : j+batch]}); err != nil {
				b.Fatal(err)
			}
		}
		plainTime += time.Since(began)

		b.StopTimer()
		truncate()
		b.StartTimer()
		began = time.Now()
		for j := 0; j < rows; j += batch {
			ok, err := s.CopyGPUSampleChunksOnce(ctx, fmt.Sprintf("bench/%d/%d", i, j), [][]schedloop.GPUSample{samples[j : j+batch]})
			if err != nil || !ok {
				b.Fatalf("once: stored %v, %v", ok, err)
			}
		}
		onceTime += time.Since(began)
	}
	b.StopTimer()
	plainRate := float64(rows*b.N) / plainTime.Seconds()
	onceRate := float64(rows*b.N) / onceTime.Seconds()
	b.ReportMetric(plainRate, "store_plain_batch_rows_per_s@rows/s")
	b.ReportMetric(onceRate, "store_once_rows_per_s@rows/s")
	b.ReportMetric(onceRate/plainRate, "store_once_ratio@ratio")
}
