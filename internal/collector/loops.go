package collector

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
)

// Source is a telemetry source; dcgm.Source implementations fit. A non-nil
// error with samples means some endpoints failed and the rest answered.
type Source interface {
	Collect(ctx context.Context) ([]schedloop.GPUSample, error)
}

// Sink takes collected samples; *Ingester is one.
type Sink interface {
	Add(samples []schedloop.GPUSample)
}

// Flusher is a Sink that can be told a round of samples is complete, so it
// writes them now rather than waiting to fill a batch; *Ingester is one.
type Flusher interface {
	Flush()
}

// Scrape collects from src every interval until ctx ends. Failed endpoints
// are logged and left to the source's own error counters; collection goes on.
func Scrape(ctx context.Context, src Source, every time.Duration, sink Sink, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		samples, err := src.Collect(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("telemetry collection incomplete", "samples", len(samples), "err", err)
		}
		if len(samples) > 0 {
			sink.Add(samples)
			// The next round is a whole interval away: waiting for more
			// samples to fill a batch would only delay these.
			if f, ok := sink.(Flusher); ok {
				f.Flush()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RollupStore is what the roller needs from the store.
type RollupStore interface {
	RollupGPUMinutes(ctx context.Context, from, to time.Time) (int64, error)
	RollupDemand(ctx context.Context, from, to time.Time) error
	RollupStates(ctx context.Context, from, to time.Time, threshold float64) error
	RollupDashboard(ctx context.Context, from, to time.Time, threshold float64) error
	GPUStateMinutes(ctx context.Context, from, to time.Time) ([]store.StateMinutes, error)
}

// Defaults of Roller.
const (
	DefaultRollupEvery    = time.Minute
	DefaultRollupLateness = 2 * time.Minute
	DefaultRollupWindow   = 15 * time.Minute
	DefaultRollupLookback = 2 * time.Hour
)

// Roller folds raw samples into minutes, demand, idle states and the
// dashboard's tables for closed ranges. Every pass re-rolls a trailing
// window (pods are recorded a little after the fact) and any earlier
// minutes that received late samples; the store's rollups are idempotent,
// so repeating a range is harmless.
type Roller struct {
	Store     RollupStore
	Threshold float64
	// Every is the pause between passes; Lateness how long a minute is
	// left open for samples in flight; Window how far back each pass
	// re-rolls; Lookback where the first pass starts.
	Every, Lateness, Window, Lookback time.Duration
	Now                               func() time.Time
	Metrics                           *Metrics
	Logger                            *slog.Logger

	// pass makes passes one at a time: Run's and any Once a caller makes
	// (a final pass before reading the tables).
	pass  sync.Mutex
	mu    sync.Mutex
	upTo  time.Time
	dirty time.Time
}

func (r *Roller) defaults() {
	if r.Every <= 0 {
		r.Every = DefaultRollupEvery
	}
	if r.Lateness <= 0 {
		r.Lateness = DefaultRollupLateness
	}
	if r.Window <= 0 {
		r.Window = DefaultRollupWindow
	}
	if r.Lookback <= 0 {
		r.Lookback = DefaultRollupLookback
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Threshold <= 0 {
		r.Threshold = store.DefaultIdleThreshold
	}
	if r.Metrics == nil {
		r.Metrics = NewMetrics()
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
}

// Written marks [oldest, ...) as needing another pass; wire it to
// IngestOptions.OnWritten.
func (r *Roller) Written(oldest, _ time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dirty.IsZero() || oldest.Before(r.dirty) {
		r.dirty = oldest
	}
}

// Run makes a pass every Every until ctx ends.
func (r *Roller) Run(ctx context.Context) error {
	r.pass.Lock()
	r.defaults()
	r.pass.Unlock()
	t := time.NewTicker(r.Every)
	defer t.Stop()
	for {
		if err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.Logger.Warn("rollup failed; retried next pass", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Once rolls up every closed minute not yet final and refreshes the idle gauges.
func (r *Roller) Once(ctx context.Context) error {
	r.pass.Lock()
	defer r.pass.Unlock()
	r.defaults()
	to := r.Now().Add(-r.Lateness).Truncate(time.Minute)
	r.mu.Lock()
	from := to.Add(-r.Lookback)
	if !r.upTo.IsZero() {
		from = r.upTo.Add(-r.Window)
	}
	dirty := r.dirty
	if !dirty.IsZero() && dirty.Before(from) {
		from = dirty.Truncate(time.Minute)
	}
	r.dirty = time.Time{}
	r.mu.Unlock()
	if !from.Before(to) {
		return nil
	}
	r.Metrics.RollupRuns.Inc()
	err := func() error {
		if _, err := r.Store.RollupGPUMinutes(ctx, from, to); err != nil {
			return err
		}
		if err := r.Store.RollupDemand(ctx, from, to); err != nil {
			return err
		}
		if err := r.Store.RollupStates(ctx, from, to, r.Threshold); err != nil {
			return err
		}
		// The dashboard's tables, from the states just written.
		return r.Store.RollupDashboard(ctx, from, to, r.Threshold)
	}()
	if err != nil {
		r.Metrics.RollupErrors.Inc()
		r.Written(from, to) // try the range again next pass
		return err
	}
	r.mu.Lock()
	r.upTo = maxTime(r.upTo, to)
	r.mu.Unlock()
	r.Metrics.RollupUpTo.Set(float64(to.Unix()))
	return r.refreshGauges(ctx, to)
}

// refreshGauges sets the idle-share gauges from the last hour rolled up.
func (r *Roller) refreshGauges(ctx context.Context, to time.Time) error {
	rows, err := r.Store.GPUStateMinutes(ctx, to.Add(-time.Hour).Truncate(time.Hour), to)
	if err != nil {
		return err
	}
	type acc struct{ idle, total float64 }
	nodes, nss, states := map[string]*acc{}, map[string]*acc{}, map[string]float64{}
	get := func(m map[string]*acc, k string) *acc {
		a := m[k]
		if a == nil {
			a = &acc{}
			m[k] = a
		}
		return a
	}
	for _, row := range rows {
		min := float64(row.Minutes)
		states[row.State] += min
		n := get(nodes, row.Node)
		n.total += min
		if row.State == "allocated_idle" || row.State == "unallocated_waiting" {
			n.idle += min
		}
		if row.Namespace != "" {
			a := get(nss, row.Namespace)
			a.total += min
			if row.State == "allocated_idle" {
				a.idle += min
			}
		}
	}
	r.Metrics.NodeIdleShare.Reset()
	r.Metrics.NamespaceIdleShare.Reset()
	for k, a := range nodes {
		if a.total > 0 {
			r.Metrics.NodeIdleShare.WithLabelValues(k).Set(a.idle / a.total)
		}
	}
	for k, a := range nss {
		if a.total > 0 {
			r.Metrics.NamespaceIdleShare.WithLabelValues(k).Set(a.idle / a.total)
		}
	}
	for _, s := range []string{"busy", "allocated_idle", "unallocated_waiting", "spare"} {
		// Prometheus's base unit of time is the second.
		r.Metrics.StateSeconds.WithLabelValues(s).Set(states[s] * 60)
	}
	return nil
}
