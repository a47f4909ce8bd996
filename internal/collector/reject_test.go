package collector_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// runIngester runs in until the test ends.
func runIngester(t *testing.T, in *collector.Ingester) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { in.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestOneBadSampleDoesNotDropTheBatch: a label holding a NUL byte makes
// Postgres refuse the COPY that carries it; the batch is split until that
// row is found, and every other target's samples are stored.
func TestOneBadSampleDoesNotDropTheBatch(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	good := storetest.Samples(250, 50, t0, time.Second)
	bad := good[0]
	bad.GPUUUID, bad.PodName = "GPU-bad", "evil\x00pod"
	m := collector.NewMetrics()
	in, err := collector.NewIngester(s, collector.IngestOptions{BatchSamples: 10_000, FlushInterval: 10 * time.Millisecond,
		Backoff: &fastBackoff, Permanent: store.Permanent, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	runIngester(t, in)
	// One batch: half the good samples, the bad one, the other half.
	in.Add(good[:125])
	in.Add([]schedloop.GPUSample{bad})
	in.Add(good[125:])
	in.Flush()
	waitFor(t, "the batch to be written or dropped", 10*time.Second, func() bool { return in.Buffered() == 0 })
	n, err := s.CountGPUSamples(ctx, t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != 250 {
		t.Errorf("%d of 250 good samples stored beside one bad one", n)
	}
	if got := testutil.ToFloat64(m.Dropped.WithLabelValues(collector.DropRejected)); got != 1 {
		t.Errorf("dropped as rejected = %v, want 1 (the NUL label)", got)
	}
}

// TestSpooledBatchWithABadSampleIsSplit: the same for a batch that comes
// back from the spool, whose halves are stored once each under ids derived
// from the segment's.
func TestSpooledBatchWithABadSampleIsSplit(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	good := storetest.Samples(100, 10, t0, time.Second)
	bad := good[0]
	bad.GPUUUID, bad.Node = "GPU-bad", "node\xff"
	// Park the samples in the spool: a writer that is down, then exit.
	down := &failingWriter{down: true}
	in, err := collector.NewIngester(down, collector.IngestOptions{SpoolDir: dir, FlushInterval: 10 * time.Millisecond,
		Backoff: &fastBackoff, DrainTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { in.Run(ctx1); close(done) }()
	in.Add(append(append(append([]schedloop.GPUSample{}, good[:50]...), bad), good[50:]...))
	cancel()
	<-done
	m := collector.NewMetrics()
	in2, err := collector.NewIngester(s, collector.IngestOptions{SpoolDir: dir, FlushInterval: 10 * time.Millisecond,
		Backoff: &fastBackoff, Permanent: store.Permanent, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	runIngester(t, in2)
	waitFor(t, "the spool to empty", 10*time.Second, func() bool {
		return testutil.ToFloat64(m.Written)+testutil.ToFloat64(m.Dropped.WithLabelValues(collector.DropRejected)) == 101
	})
	if n, err := s.CountGPUSamples(ctx, t0, t0.Add(time.Hour)); err != nil || n != 100 {
		t.Errorf("%d of 100 good spooled samples stored (%v)", n, err)
	}
}

// TestIngestDropsSamplesFarFromItsClock: one series per day since 2001 and
// one from the far future are dropped and counted at Add, so they never
// reach Postgres to make it create a partition per day.
func TestIngestDropsSamplesFarFromItsClock(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	var page []schedloop.GPUSample
	for d := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC); d.Before(now.Add(-48 * time.Hour)); d = d.AddDate(0, 0, 1) {
		page = append(page, schedloop.GPUSample{Time: d, GPUUUID: "GPU-old", Node: "n"})
	}
	old := len(page)
	page = append(page, schedloop.GPUSample{Time: time.Date(287168, 1, 1, 0, 0, 0, 0, time.UTC), GPUUUID: "GPU-future", Node: "n"})
	page = append(page, storetest.Samples(8, 8, now.Add(-time.Minute), time.Second)...)
	m := collector.NewMetrics()
	in, err := collector.NewIngester(s, collector.IngestOptions{FlushInterval: 10 * time.Millisecond, Backoff: &fastBackoff,
		Permanent: store.Permanent, Metrics: m, MaxAge: collector.DefaultMaxSampleAge, MaxAhead: collector.DefaultMaxSampleAhead,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	runIngester(t, in)
	began := time.Now()
	in.Add(page)
	in.Flush()
	waitFor(t, "the page to be written", 10*time.Second, func() bool { return in.Buffered() == 0 })
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("writing the page took %v", took)
	}
	if got := testutil.ToFloat64(m.Dropped.WithLabelValues(collector.DropTimeRange)); got != float64(old+1) {
		t.Errorf("dropped for their time = %v, want %d", got, old+1)
	}
	var parts int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = 'gpu_samples'`).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts > 3 {
		t.Errorf("%d sample partitions after one page, want the default one and today's", parts)
	}
}

// TestDrainSplitsARefusedBatch: what is still buffered at exit goes through
// the same splitting, so one bad row does not send a whole batch to the
// spool, where nothing would send it again before the next start.
func TestDrainSplitsARefusedBatch(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	good := storetest.Samples(64, 8, t0, time.Second)
	bad := good[0]
	bad.GPUUUID, bad.Container = "GPU-bad", "c\x00"
	spool := t.TempDir()
	in, err := collector.NewIngester(s, collector.IngestOptions{BatchSamples: 1000, FlushInterval: time.Hour, SpoolDir: spool,
		Backoff: &fastBackoff, Permanent: store.Permanent, DrainTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	in.Add(append([]schedloop.GPUSample{bad}, good...))
	stopped, cancel := context.WithCancel(ctx)
	cancel() // Run goes straight to the drain
	in.Run(stopped)
	if n, err := s.CountGPUSamples(ctx, t0, t0.Add(time.Hour)); err != nil || n != 64 {
		t.Errorf("%d of 64 good samples stored at exit (%v)", n, err)
	}
	if m, _ := filepath.Glob(filepath.Join(spool, "*.spool")); len(m) != 0 {
		t.Errorf("spool holds %v after a drain that could store everything but the refused row", m)
	}
}
