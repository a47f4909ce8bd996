package collector_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

var fastBackoff = wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 300 * time.Millisecond}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// failingWriter refuses every batch while down is set.
type failingWriter struct {
	mu     sync.Mutex
	down   bool
	stored []schedloop.GPUSample
}

func (f *failingWriter) CopyGPUSamples(_ context.Context, s []schedloop.GPUSample) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return 0, errors.New("connection refused")
	}
	f.stored = append(f.stored, s...)
	return int64(len(s)), nil
}

func (f *failingWriter) set(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }
func (f *failingWriter) n() int        { f.mu.Lock(); defer f.mu.Unlock(); return len(f.stored) }

func batch(n int, at time.Time) []schedloop.GPUSample {
	return storetest.Samples(n, n, at, time.Second)
}

func TestIngestCountsWhatDoesNotFit(t *testing.T) {
	w := &failingWriter{down: true}
	m := collector.NewMetrics()
	in, err := collector.NewIngester(w, collector.IngestOptions{BufferSamples: 2500, BatchSamples: 1000,
		FlushInterval: 10 * time.Millisecond, Backoff: &fastBackoff, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { in.Run(ctx); close(done) }()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 4 {
		in.Add(batch(1000, t0.Add(time.Duration(i)*time.Minute)))
	}
	in.Add([]schedloop.GPUSample{{GPUUUID: "no-time"}})
	if got := testutil.ToFloat64(m.Dropped.WithLabelValues(collector.DropBufferFull)); got != 2000 {
		t.Errorf("dropped (buffer full) = %v, want 2000: two batches of 1000 fit in 2500", got)
	}
	if got := testutil.ToFloat64(m.Dropped.WithLabelValues(collector.DropInvalid)); got != 1 {
		t.Errorf("dropped (invalid) = %v, want 1", got)
	}
	waitFor(t, "failed writes to be counted", 5*time.Second, func() bool { return testutil.ToFloat64(m.WriteErrors) >= 2 })
	if lag := in.Lag(t0.Add(time.Hour)); lag != time.Hour {
		t.Errorf("lag = %v, want 1h (the oldest buffered sample)", lag)
	}
	w.set(false)
	waitFor(t, "the buffer to drain", 5*time.Second, func() bool { return w.n() == 2000 })
	cancel()
	<-done
	if in.Buffered() != 0 {
		t.Errorf("buffered after drain = %d", in.Buffered())
	}
}

// TestAddQueuesValidSamplesWithoutCopying: a scrape's samples are queued as
// they are. Copying every page into a fresh slice doubled the collector's
// allocation rate.
func TestAddQueuesValidSamplesWithoutCopying(t *testing.T) {
	in, err := collector.NewIngester(&failingWriter{}, collector.IngestOptions{BufferSamples: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	page := batch(512, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	// Queuing a slice header may grow the queue now and then; a copy of
	// the page would be one allocation of 512 samples every time.
	allocs := testing.AllocsPerRun(200, func() { in.Add(page) })
	if allocs > 0.5 {
		t.Errorf("Add allocated %.2f times per call, want the page queued without a copy", allocs)
	}
	if got := in.Buffered(); got != 201*512 {
		t.Errorf("buffered %d samples, want %d", got, 201*512)
	}
}

func TestIngestSpoolsAtExitAndResumes(t *testing.T) {
	dir := t.TempDir()
	w := &failingWriter{down: true}
	opts := collector.IngestOptions{BufferSamples: 1500, BatchSamples: 1000, SpoolDir: dir, SpoolMaxBytes: 1 << 30,
		FlushInterval: 10 * time.Millisecond, Backoff: &fastBackoff, DrainTimeout: 50 * time.Millisecond}
	in, err := collector.NewIngester(w, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { in.Run(ctx); close(done) }()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 { // 5000 samples through a 1500-sample buffer: the rest spills to disk
		in.Add(batch(1000, t0.Add(time.Duration(i)*time.Minute)))
	}
	cancel()
	<-done
	// A new process on the same spool sends everything once Postgres answers.
	w.set(false)
	in2, err := collector.NewIngester(w, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go in2.Run(ctx2)
	waitFor(t, "spooled samples to be stored", 10*time.Second, func() bool { return w.n() >= 5000 })
	if w.n() != 5000 {
		t.Fatalf("stored %d samples, want 5000", w.n())
	}
	seen := map[string]bool{}
	for _, s := range w.stored {
		k := s.GPUUUID + s.Time.String()
		if seen[k] {
			t.Fatalf("sample %s stored twice", k)
		}
		seen[k] = true
	}
}

// localPostgres is a throwaway server on its own port that a test can stop
// and start again with its data kept.
type localPostgres struct {
	port  int
	state string
	url   string
}

func startLocalPostgres(t *testing.T) *localPostgres {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	pg := &localPostgres{port: port, state: filepath.Join(os.TempDir(), fmt.Sprintf("schedloop-pgfault-%d", port))}
	pg.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	pg.script(t, "start")
	t.Cleanup(func() {
		cmd := exec.Command("../../scripts/postgres-local.sh", "stop")
		cmd.Env = append(os.Environ(), "PGPORT="+strconv.Itoa(port), "SCHEDLOOP_PG_STATE="+pg.state)
		cmd.Run()
		os.RemoveAll(pg.state)
	})
	return pg
}

func (pg *localPostgres) script(t *testing.T, action string) {
	t.Helper()
	cmd := exec.Command("../../scripts/postgres-local.sh", action)
	cmd.Env = append(os.Environ(), "PGPORT="+strconv.Itoa(pg.port), "SCHEDLOOP_PG_STATE="+pg.state)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("postgres-local.sh %s: %v\n%s", action, err, out)
	}
}

// restart starts the stopped server on its existing data (the script's start
// would make a fresh cluster).
func (pg *localPostgres) restart(t *testing.T) {
	t.Helper()
	bindirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if len(bindirs) == 0 {
		t.Fatal("no /usr/lib/postgresql/*/bin")
	}
	args := []string{filepath.Join(bindirs[len(bindirs)-1], "pg_ctl"), "-D", filepath.Join(pg.state, "data"),
		"-l", filepath.Join(pg.state, "server.log"), "-w", "-o",
		fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", pg.port, pg.state), "start"}
	if os.Getuid() == 0 {
		args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
	}
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("restart postgres: %v\n%s", err, out)
	}
}

// TestIngestLosesNothingWhilePostgresRestarts stops the database in the
// middle of a steady ingest and starts it again: every sample produced while
// it was away fits in the buffer and must arrive exactly once.
func TestIngestLosesNothingWhilePostgresRestarts(t *testing.T) {
	pg := startLocalPostgres(t)
	ctx := context.Background()
	s, err := store.Open(ctx, pg.url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	m := collector.NewMetrics()
	in, err := collector.NewIngester(s, collector.IngestOptions{BufferSamples: 200_000, BatchSamples: 2000,
		FlushInterval: 20 * time.Millisecond, Backoff: &fastBackoff, Permanent: store.Permanent, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { in.Run(runCtx); close(done) }()

	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	const perBatch, batches = 500, 60
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			in.Add(storetest.Samples(perBatch, perBatch, t0.Add(time.Duration(i)*15*time.Second), time.Second))
			time.Sleep(5 * time.Millisecond) // a steady source, not one burst
		}
	}
	produce(0, 20)
	waitFor(t, "first samples stored", 20*time.Second, func() bool { return testutil.ToFloat64(m.Written) > 0 })
	pg.script(t, "stop")
	produce(20, 40)
	waitFor(t, "a failed write while Postgres is down", 20*time.Second, func() bool { return testutil.ToFloat64(m.WriteErrors) > 0 })
	pg.restart(t)
	produce(40, batches)
	want := float64(perBatch * batches)
	waitFor(t, "every sample stored after the restart", 60*time.Second, func() bool { return testutil.ToFloat64(m.Written) >= want })
	cancel()
	<-done

	n, err := s.CountGPUSamples(ctx, t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dropped := 0.0
	for _, r := range []string{collector.DropBufferFull, collector.DropRejected, collector.DropShutdown, collector.DropInvalid} {
		dropped += testutil.ToFloat64(m.Dropped.WithLabelValues(r))
	}
	t.Logf("%d samples stored, %v write errors while Postgres was down, %v dropped", n, testutil.ToFloat64(m.WriteErrors), dropped)
	if n != int64(want) || dropped != 0 {
		t.Fatalf("stored %d samples and dropped %v, want %v stored and none dropped", n, dropped, want)
	}
}

// roundSource returns one scrape round of n samples per call.
type roundSource struct {
	n     int
	calls atomic.Int32
}

func (r *roundSource) Collect(context.Context) ([]schedloop.GPUSample, error) {
	i := r.calls.Add(1)
	return batch(r.n, time.Date(2026, 1, 1, 0, 0, int(i), 0, time.UTC)), nil
}

// TestScrapeRoundIsWrittenWithoutWaitingForABatch: a round smaller than a
// batch is written when the round ends, not after FlushInterval.
func TestScrapeRoundIsWrittenWithoutWaitingForABatch(t *testing.T) {
	w := &failingWriter{}
	in, err := collector.NewIngester(w, collector.IngestOptions{BatchSamples: 10_000, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go in.Run(ctx)
	go collector.Scrape(ctx, &roundSource{n: 16}, time.Hour, in, nil)
	waitFor(t, "the first round to be written", 5*time.Second, func() bool { return w.n() == 16 })
}
