package collector_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// lostAck is the real store, except that its first batch-with-id commits
// and then reports an error, as when the connection drops after COMMIT: the
// ingester cannot tell that the batch is stored, and the same spooled batch
// is sent again, as it would be after a crash before its file is removed.
type lostAck struct {
	*store.Store
	mu   sync.Mutex
	lost int
}

func (l *lostAck) CopyGPUSampleChunksOnce(ctx context.Context, id string, s [][]schedloop.GPUSample) (bool, error) {
	stored, err := l.Store.CopyGPUSampleChunksOnce(ctx, id, s)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && stored && l.lost == 0 {
		l.lost++
		return false, errors.New("connection reset by peer after COMMIT")
	}
	return stored, err
}

// TestSpooledBatchIsStoredOnce: a spooled batch whose COPY committed but
// whose acknowledgement (or the removal of its file) was lost is recognised
// by its id when sent again, and stored once.
func TestSpooledBatchIsStoredOnce(t *testing.T) {
	s := storetest.New(t)
	dir := t.TempDir()
	opts := collector.IngestOptions{BufferSamples: 1500, BatchSamples: 1000, SpoolDir: dir, SpoolMaxBytes: 1 << 30,
		FlushInterval: 10 * time.Millisecond, Backoff: &fastBackoff, DrainTimeout: 50 * time.Millisecond}
	// Postgres away: everything ends in the spool.
	down := &failingWriter{down: true}
	in, err := collector.NewIngester(down, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { in.Run(ctx); close(done) }()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		in.Add(batch(1000, t0.Add(time.Duration(i)*time.Minute)))
	}
	cancel()
	<-done

	// The next run sends the spool to the real database, losing one ack.
	m := collector.NewMetrics()
	opts.Metrics = m
	w := &lostAck{Store: s}
	in2, err := collector.NewIngester(w, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { in2.Run(ctx2); close(done2) }()
	waitFor(t, "the spool to empty", 10*time.Second, func() bool {
		return testutil.ToFloat64(m.Written)+testutil.ToFloat64(m.Duplicates) >= 3000
	})
	cancel2()
	<-done2
	n, err := s.CountGPUSamples(context.Background(), t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != 3000 || w.lost != 1 {
		t.Errorf("%d samples stored after one lost acknowledgement (%d lost); want 3000", n, w.lost)
	}
	if d := testutil.ToFloat64(m.Duplicates); d == 0 {
		t.Errorf("the batch sent again was not counted as a duplicate")
	}
}
