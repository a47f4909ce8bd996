package collector

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/schedloop/schedloop"
)

// SampleWriter stores a batch of samples all-or-nothing; *store.Store is one.
type SampleWriter interface {
	CopyGPUSamples(ctx context.Context, samples []schedloop.GPUSample) (int64, error)
}

// ChunkWriter is a SampleWriter that also takes a batch as the slices it
// was queued in, so that a batch gathered from many scrapes is sent without
// being copied into one slice; *store.Store is one.
type ChunkWriter interface {
	CopyGPUSampleChunks(ctx context.Context, chunks [][]schedloop.GPUSample) (int64, error)
}

// sampleBatch is a batch as the slices it was queued in, oldest first.
type sampleBatch [][]schedloop.GPUSample

func (b sampleBatch) len() int {
	n := 0
	for _, c := range b {
		n += len(c)
	}
	return n
}

// flat is the batch as one slice, for writers that want one.
func (b sampleBatch) flat() []schedloop.GPUSample {
	if len(b) == 1 {
		return b[0]
	}
	return slices.Concat(b...)
}

// OnceWriter stores a batch at most once under an id, recording the id in
// the same transaction; *store.Store is one. When the SampleWriter is also a
// OnceWriter, every batch goes through it under an id that stays with the
// batch through retries, splits and the spool: a COPY that committed but
// whose acknowledgement was lost (the connection dropped after COMMIT), or a
// spool file that outlived its COPY in a crash, is recognised when sent
// again and not stored twice.
type OnceWriter interface {
	CopyGPUSampleChunksOnce(ctx context.Context, batchID string, chunks [][]schedloop.GPUSample) (stored bool, err error)
}

// piece is a batch with the id it is stored under (empty when the writer
// is not a OnceWriter).
type piece struct {
	id    string
	batch sampleBatch
}

func piecesLen(ps []piece) int {
	n := 0
	for _, p := range ps {
		n += p.batch.len()
	}
	return n
}

// newBatchID names a batch taken from memory: random, so that ids never
// repeat across replicas and restarts.
func newBatchID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms (Go 1.24+).
		panic(err)
	}
	return "batch/" + hex.EncodeToString(b[:])
}

// Defaults of IngestOptions.
const (
	DefaultBufferSamples = 1_000_000
	DefaultBatchSamples  = 20_000
	DefaultWriters       = 2
	DefaultSpoolMaxBytes = 1 << 30
	DefaultFlushInterval = time.Second
	DefaultDrainTimeout  = 5 * time.Second
	// DefaultMaxSampleAge and DefaultMaxSampleAhead are the pipeline's
	// window around its clock for sample timestamps (dcgm-exporter sends
	// none, so its samples carry the scrape's time).
	DefaultMaxSampleAge   = 24 * time.Hour
	DefaultMaxSampleAhead = time.Hour
)

// DefaultBackoff paces retries while Postgres is away: 100 ms doubling to 30 s, with jitter.
var DefaultBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 30 * time.Second}

// IngestOptions tune an Ingester; zero fields take the defaults above.
type IngestOptions struct {
	// BufferSamples caps the samples held in memory, in flight included.
	BufferSamples int
	// BatchSamples caps one COPY.
	BatchSamples int
	// Writers is the number of COPYs run at once; default 2, so that one
	// batch is encoded and sent while Postgres inserts the other (about a
	// tenth more samples/s than one writer on two cores).
	Writers int
	// SpoolDir, when set, receives the oldest buffered samples when memory
	// is full and whatever is still buffered at exit, up to SpoolMaxBytes.
	SpoolDir      string
	SpoolMaxBytes int64
	// FlushInterval is the longest a partial batch waits for more samples.
	FlushInterval time.Duration
	// DrainTimeout bounds the last write attempt at exit.
	DrainTimeout time.Duration
	Backoff      *wait.Backoff
	// Permanent reports errors that retrying the same batch cannot fix
	// (Postgres rejected its content); such a batch is split in halves until
	// the rows Postgres refuses are found, and only those are dropped and
	// counted, so one bad sample does not take a whole batch with it.
	Permanent func(error) bool
	// MaxAge and MaxAhead, when set, bound sample timestamps relative to
	// Now (default time.Now): samples outside are dropped and counted. A
	// page with one series per day since 2001, or one from the year 287168,
	// would otherwise have Postgres create a partition for every day.
	MaxAge, MaxAhead time.Duration
	Now              func() time.Time
	// OnWritten is told the time span of each stored batch, so rollups can
	// revisit minutes that received late samples.
	OnWritten func(oldest, newest time.Time)
	Logger    *slog.Logger
	Metrics   *Metrics
}

// Ingester buffers samples and writes them in COPY batches, retrying with
// backoff while the database is away. Add never blocks on the database.
type Ingester struct {
	w     SampleWriter
	opts  IngestOptions
	m     *Metrics
	log   *slog.Logger
	spool *spool

	mu    sync.Mutex
	queue [][]schedloop.GPUSample // oldest first
	// retry holds pieces a writer gave back unstored when it stopped; the
	// exit drain sends them first, under their ids.
	retry    []piece
	buffered int       // samples in queue plus in flight
	oldest   time.Time // oldest sample not yet written (approximate: per chunk)
	// flushing makes writers take partial batches until the queue is empty.
	flushing bool
	wake     chan struct{}
}

// NewIngester prepares an ingester writing to w; call Run to start it.
func NewIngester(w SampleWriter, opts IngestOptions) (*Ingester, error) {
	if opts.BufferSamples <= 0 {
		opts.BufferSamples = DefaultBufferSamples
	}
	if opts.BatchSamples <= 0 {
		opts.BatchSamples = DefaultBatchSamples
	}
	if opts.Writers <= 0 {
		opts.Writers = DefaultWriters
	}
	if opts.SpoolMaxBytes <= 0 {
		opts.SpoolMaxBytes = DefaultSpoolMaxBytes
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	if opts.Backoff == nil {
		b := DefaultBackoff
		opts.Backoff = &b
	}
	if opts.Permanent == nil {
		opts.Permanent = func(error) bool { return false }
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	in := &Ingester{w: w, opts: opts, m: opts.Metrics, log: opts.Logger, wake: make(chan struct{}, 1)}
	if opts.SpoolDir != "" {
		s, err := openSpool(opts.SpoolDir, opts.SpoolMaxBytes)
		if err != nil {
			return nil, err
		}
		in.spool = s
		if _, n := s.stats(); n > 0 {
			in.log.Info("samples left in the spool by a previous run will be sent", "samples", n, "dir", opts.SpoolDir)
		}
	}
	return in, nil
}

// Collectors exposes the buffer gauges, read at scrape time.
func (in *Ingester) Collectors() []prometheus.Collector {
	gf := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help}, f)
	}
	return []prometheus.Collector{
		gf("buffer_samples", "GPU samples held in memory waiting for Postgres, in-flight batches included.",
			func() float64 { return float64(in.Buffered()) }),
		gf("buffer_capacity_samples", "Capacity of the in-memory sample buffer.",
			func() float64 { return float64(in.opts.BufferSamples) }),
		gf("spool_bytes", "Bytes of GPU samples in the on-disk spool.",
			func() float64 { b, _ := in.spool.stats(); return float64(b) }),
		gf("spool_samples", "GPU samples in the on-disk spool.",
			func() float64 { _, n := in.spool.stats(); return float64(n) }),
		gf("lag_seconds", "Age of the oldest GPU sample held in memory and not yet stored; 0 when none waits.",
			func() float64 { return in.Lag(time.Now()).Seconds() }),
	}
}

// Buffered is the number of samples in memory, in flight included.
func (in *Ingester) Buffered() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.buffered
}

// Lag is how old the oldest unwritten sample in memory is at now.
func (in *Ingester) Lag(now time.Time) time.Duration {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.buffered == 0 || in.oldest.IsZero() {
		return 0
	}
	return max(now.Sub(in.oldest), 0)
}

// Add queues samples. When memory is full the oldest queued samples move to
// the spool; when the spool is full too (or absent), the new samples are
// dropped and counted. It never waits for Postgres.
func (in *Ingester) Add(samples []schedloop.GPUSample) {
	var valid []schedloop.GPUSample // stays nil, and samples is queued as is, unless one is invalid
	now := in.opts.Now()
	oldest, newest := now.Add(-in.opts.MaxAge), now.Add(in.opts.MaxAhead)
	for i := range samples {
		reason := ""
		switch t := samples[i].Time; {
		case t.IsZero() || samples[i].GPUUUID == "":
			reason = DropInvalid
		case in.opts.MaxAge > 0 && t.Before(oldest), in.opts.MaxAhead > 0 && t.After(newest):
			reason = DropTimeRange
		}
		if reason != "" {
			if valid == nil {
				valid = make([]schedloop.GPUSample, 0, len(samples))
				valid = append(valid, samples[:i]...)
			}
			in.m.Dropped.WithLabelValues(reason).Inc()
			continue
		}
		if valid != nil {
			valid = append(valid, samples[i])
		}
	}
	if valid != nil {
		samples = valid
	}
	if len(samples) == 0 {
		return
	}
	in.m.Received.Add(float64(len(samples)))
	in.mu.Lock()
	for in.buffered+len(samples) > in.opts.BufferSamples && len(in.queue) > 0 && in.spool != nil {
		// Spill the oldest queued chunk; the writer sends the spool first, so
		// order is kept.
		chunk := in.queue[0]
		in.queue = in.queue[1:]
		in.buffered -= len(chunk)
		in.mu.Unlock()
		err := in.spool.put("", chunk)
		in.mu.Lock()
		if err != nil {
			// Put it back: the new samples are the ones dropped.
			in.queue = append([][]schedloop.GPUSample{chunk}, in.queue...)
			in.buffered += len(chunk)
			if !errors.Is(err, errSpoolFull) {
				in.log.Error("spool write failed", "err", err)
			}
			break
		}
		in.m.Spooled.Add(float64(len(chunk)))
	}
	if in.buffered+len(samples) > in.opts.BufferSamples && in.spool != nil {
		// Everything in memory is in flight: the new samples go to disk.
		in.mu.Unlock()
		err := in.spool.put("", samples)
		if err == nil {
			in.m.Spooled.Add(float64(len(samples)))
			return
		}
		if !errors.Is(err, errSpoolFull) {
			in.log.Error("spool write failed", "err", err)
		}
		in.mu.Lock()
	}
	if in.buffered+len(samples) > in.opts.BufferSamples {
		in.mu.Unlock()
		in.m.Dropped.WithLabelValues(DropBufferFull).Add(float64(len(samples)))
		in.log.Warn("ingest buffer full, samples dropped", "samples", len(samples), "buffer", in.opts.BufferSamples)
		return
	}
	if in.buffered == 0 {
		in.oldest = samples[0].Time
	}
	in.queue = append(in.queue, samples)
	in.buffered += len(samples)
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// Flush has what is queued written now, the last partial batch included,
// rather than after FlushInterval: the end of a scrape round, whose samples
// should not wait for the next round or the next tick.
func (in *Ingester) Flush() {
	in.mu.Lock()
	in.flushing = true
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// take removes up to BatchSamples queued samples, whole chunks first, and
// names them; a piece given back is taken first, as it was.
func (in *Ingester) take(force bool) piece {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.retry) > 0 {
		p := in.retry[0]
		in.retry = in.retry[1:]
		return p
	}
	queued := 0
	for _, c := range in.queue {
		queued += len(c)
	}
	if queued == 0 {
		in.flushing = false
		return piece{}
	}
	if !force && !in.flushing && queued < in.opts.BatchSamples {
		return piece{}
	}
	var batch sampleBatch
	room := in.opts.BatchSamples
	for len(in.queue) > 0 && room > 0 {
		c := in.queue[0]
		if len(c) > room {
			batch = append(batch, c[:room])
			in.queue[0] = c[room:]
			break
		}
		batch = append(batch, c)
		room -= len(c)
		in.queue[0] = nil
		in.queue = in.queue[1:]
	}
	// The batch is in flight and still the oldest: oldest moves on in done.
	p := piece{batch: batch}
	if _, ok := in.w.(OnceWriter); ok {
		p.id = newBatchID()
	}
	return p
}

// giveBack keeps unwritten pieces, ids and all, to be taken first: sent
// again under another id, or merged into another batch, a piece whose COPY
// committed unacknowledged would be stored twice.
func (in *Ingester) giveBack(rest []piece) {
	in.mu.Lock()
	in.retry = append(in.retry, rest...)
	in.oldest = in.retry[0].batch[0][0].Time
	in.mu.Unlock()
}

func (in *Ingester) done(n int) {
	in.mu.Lock()
	in.buffered -= n
	in.oldest = time.Time{}
	switch {
	case len(in.retry) > 0:
		in.oldest = in.retry[0].batch[0][0].Time
	case len(in.queue) > 0:
		in.oldest = in.queue[0][0].Time
	}
	in.mu.Unlock()
}

// Run writes batches until ctx ends, then makes one last attempt to store
// what is buffered and spools the rest.
func (in *Ingester) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := range in.opts.Writers {
		// One writer owns the spool, so no segment is sent twice.
		wg.Go(func() { in.writer(ctx, i == 0) })
	}
	wg.Wait()
	in.drain()
	return nil
}

func (in *Ingester) writer(ctx context.Context, spool bool) {
	tick := time.NewTicker(in.opts.FlushInterval)
	defer tick.Stop()
	force := false
	for ctx.Err() == nil {
		if spool && in.spool != nil {
			if seg, id, batch, ok, err := in.spool.oldest(); ok {
				if err != nil {
					in.log.Error("spool segment unreadable, dropped", "err", err)
					in.m.Dropped.WithLabelValues(DropSpoolRead).Add(float64(seg.samples))
					in.spool.remove(seg)
					continue
				}
				// A segment cut short by ctx stays: its stored parts are
				// recorded by id and skipped when it is sent again.
				if in.write(ctx, piece{id: id, batch: sampleBatch{batch}}) == nil {
					in.spool.remove(seg)
				}
				continue
			}
		}
		if p := in.take(force); p.batch != nil {
			rest := in.write(ctx, p)
			in.done(p.batch.len() - piecesLen(rest))
			if rest != nil {
				in.giveBack(rest)
			}
			continue
		}
		select {
		case <-ctx.Done():
		case <-in.wake:
			force = false
		case <-tick.C:
			force = true
		}
	}
}

// write stores a piece, retrying with backoff under its id, and returns
// what is still unstored when ctx ended first (nil: all stored, or dropped
// and counted), each part with the id it must be sent again under.
func (in *Ingester) write(ctx context.Context, p piece) []piece {
	b := *in.opts.Backoff
	once, _ := in.w.(OnceWriter)
	batch, n := p.batch, p.batch.len()
	for {
		began := time.Now()
		// A COPY already under way finishes even when ctx ends, so that
		// fewer batches go to the spool at exit; DrainTimeout bounds it.
		copyCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.opts.DrainTimeout)
		var err error
		if p.id != "" && once != nil {
			var stored bool
			if stored, err = once.CopyGPUSampleChunksOnce(copyCtx, p.id, batch); err == nil && !stored {
				cancel()
				in.m.Duplicates.Add(float64(n))
				in.log.Info("batch was already stored (its acknowledgement was lost, or its spool file outlived its COPY); not stored again",
					"batch", p.id, "samples", n)
				return nil
			}
		} else {
			err = in.copy(copyCtx, batch)
		}
		cancel()
		if err == nil {
			in.m.WriteDuration.Observe(time.Since(began).Seconds())
			in.m.Written.Add(float64(n))
			in.m.LastWrite.SetToCurrentTime()
			if in.opts.OnWritten != nil {
				lo, hi := batch[0][0].Time, batch[0][0].Time
				for _, c := range batch {
					for i := range c {
						lo, hi = minTime(lo, c[i].Time), maxTime(hi, c[i].Time)
					}
				}
				in.opts.OnWritten(lo, hi)
			}
			return nil
		}
		if ctx.Err() != nil {
			return []piece{p}
		}
		in.m.WriteErrors.Inc()
		if in.opts.Permanent(err) {
			if n > 1 {
				return in.split(ctx, p)
			}
			s := batch[0][0]
			in.log.Error("Postgres rejected a sample; dropped", "gpu", s.GPUUUID, "node", s.Node, "pod", s.PodNamespace+"/"+s.PodName,
				"time", s.Time, "err", err)
			in.m.Dropped.WithLabelValues(DropRejected).Inc()
			return nil
		}
		delay := b.Step()
		in.log.Warn("sample batch not stored, retrying", "samples", n, "retry_in", delay.Round(time.Millisecond), "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return []piece{p}
		case <-t.C:
		}
	}
}

// split writes a batch Postgres refused as two halves, each split again
// while refused, so that only the refused rows are dropped: about two COPYs
// per level for each bad row, instead of losing every target's samples to
// one target's bad label. Halves get ids derived from the batch's own, so
// a replay after a crash mid-split stores no half twice. It returns what is
// unstored when ctx ends.
func (in *Ingester) split(ctx context.Context, p piece) []piece {
	flat := p.batch.flat()
	halves := [2][]schedloop.GPUSample{flat[:len(flat)/2], flat[len(flat)/2:]}
	var subs [2]piece
	for i, h := range halves {
		subs[i].batch = sampleBatch{h}
		if p.id != "" {
			subs[i].id = fmt.Sprintf("%s/%d", p.id, i)
		}
	}
	for i, sub := range subs {
		if rest := in.write(ctx, sub); rest != nil {
			if i == 0 {
				rest = append(rest, subs[1])
			}
			return rest
		}
	}
	return nil
}

// copy sends batch through the writer, as its slices when it takes them.
func (in *Ingester) copy(ctx context.Context, batch sampleBatch) error {
	if cw, ok := in.w.(ChunkWriter); ok {
		_, err := cw.CopyGPUSampleChunks(ctx, batch)
		return err
	}
	_, err := in.w.CopyGPUSamples(ctx, batch.flat())
	return err
}

// drain runs after the writers stop: one bounded attempt to store what is
// left, then the spool, then counted drops.
func (in *Ingester) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), in.opts.DrainTimeout)
	defer cancel()
	for {
		p := in.take(true)
		if p.batch == nil {
			return
		}
		// Written as the writers write, refused rows split out, until the
		// drain's deadline; what is left goes to the spool under its id.
		rest := []piece{p}
		if ctx.Err() == nil {
			rest = in.write(ctx, p)
		}
		in.done(p.batch.len() - piecesLen(rest))
		for _, r := range rest {
			n := r.batch.len()
			if in.spool != nil {
				if err := in.spool.put(r.id, r.batch.flat()); err == nil {
					in.m.Spooled.Add(float64(n))
					in.done(n)
					continue
				} else {
					in.log.Error("could not spool samples at exit", "samples", n, "err", err)
				}
			}
			in.m.Dropped.WithLabelValues(DropShutdown).Add(float64(n))
			in.done(n)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// String describes the options for the start-up log.
func (o IngestOptions) String() string {
	return fmt.Sprintf("buffer %d samples, batch %d, %d writers, spool %q (max %d bytes)", o.BufferSamples, o.BatchSamples, o.Writers, o.SpoolDir, o.SpoolMaxBytes)
}
