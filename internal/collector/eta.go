package collector

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/schedloop/schedloop/internal/eta"
	"github.com/schedloop/schedloop/internal/etaserve"
	"github.com/schedloop/schedloop/internal/store"
)

// Defaults of Estimator.
const (
	// DefaultETAEvery: a pending job's estimate moves as jobs start and
	// end, which on a busy cluster is every few minutes.
	DefaultETAEvery = 5 * time.Minute
	// DefaultETARetention keeps a week of estimates to score.
	DefaultETARetention = 7 * 24 * time.Hour
	// DefaultETADebounce: a change (a pod created, bound or ended, a
	// profile applied) comes in bursts (a gang's members, a job's pods
	// ending together); one estimate after the burst answers them all,
	// and an estimate of a large cluster takes about a second.
	DefaultETADebounce = 15 * time.Second
)

// WaitBuckets are the expected-wait classes of the pending-jobs gauge, by
// their upper bound; a job not expected to start is "never".
var WaitBuckets = []struct {
	Label string
	Upper time.Duration
}{{"5m", 5 * time.Minute}, {"30m", 30 * time.Minute}, {"2h", 2 * time.Hour}, {"12h", 12 * time.Hour}, {"inf", eta.Never}}

// Estimator estimates every pending job's start on a schedule and on
// change, stores the estimates with the time they were made, so their
// accuracy can be measured later (store.ETAAccuracy), and sets the
// pending-jobs gauge.
type Estimator struct {
	Service   *etaserve.Service
	Store     *store.Store
	Every     time.Duration
	Retention time.Duration
	// Debounce is how long after a change (Changed, or a newly applied
	// profile, which Run looks for this often) the estimate is made: the
	// changes of that time are answered by one estimate, so estimates on
	// change come at most once per Debounce. Zero means
	// DefaultETADebounce.
	Debounce time.Duration
	Gauge    *prometheus.GaugeVec // by wait bucket
	// Annotate, when set, writes each estimate onto the waiting pods.
	Annotate *Annotator
	Logger   *slog.Logger

	init    sync.Once
	changes chan struct{}
}

func (e *Estimator) changed() chan struct{} {
	e.init.Do(func() { e.changes = make(chan struct{}, 1) })
	return e.changes
}

// Changed says that what the estimate starts from changed: Run estimates
// again within Debounce. It never blocks.
func (e *Estimator) Changed() {
	select {
	case e.changed() <- struct{}{}:
	default:
	}
}

// NewPendingByWaitGauge is the gauge of pending jobs by expected wait.
func NewPendingByWaitGauge() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "eta", Name: "pending_jobs",
		Help: "Pending jobs by their expected wait (p50 of the estimate) from the last estimate: wait is the bucket's upper bound (5m, 30m, 2h, 12h, inf), never for jobs not expected to start."},
		[]string{"wait"})
}

// Run estimates every Every, and Debounce after a change, until ctx ends.
func (e *Estimator) Run(ctx context.Context) error {
	every := cmp.Or(max(e.Every, 0), DefaultETAEvery)
	debounce := cmp.Or(max(e.Debounce, 0), DefaultETADebounce)
	t := time.NewTicker(every)
	defer t.Stop()
	look := time.NewTicker(debounce)
	defer look.Stop()
	applied := e.appliedProfile(ctx)
	for {
		// A cluster with no node stored yet has nothing to estimate.
		if err := e.Once(ctx); err != nil && ctx.Err() == nil && e.Logger != nil && !errors.Is(err, store.ErrNotFound) {
			e.Logger.Warn("wait estimate failed; retried next pass", "err", err)
		}
		var due <-chan time.Time
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				break wait
			case <-due:
				break wait
			case <-e.changed():
				if due == nil {
					due = time.After(debounce)
				}
			case <-look.C:
				if now := e.appliedProfile(ctx); now != applied {
					applied = now
					e.Changed()
				}
			}
		}
	}
}

// appliedProfile names the applied profile's version: its id and when it
// was applied (nothing applied, or unreadable: the zero value, and the
// next look that reads one counts as a change).
func (e *Estimator) appliedProfile(ctx context.Context) profileVersion {
	p, err := e.Store.AppliedProfile(ctx)
	if err != nil {
		return profileVersion{}
	}
	return profileVersion{p.ID, p.Applied.UnixNano()}
}

type profileVersion struct{ id, appliedAt int64 }

// Once makes one estimate, stores it and sets the gauge.
func (e *Estimator) Once(ctx context.Context) error {
	a, err := e.Service.Pending(ctx)
	if err != nil {
		return err
	}
	counts := map[string]float64{"never": 0}
	for _, b := range WaitBuckets {
		counts[b.Label] = 0
	}
	rows := make([]store.ETAEstimate, 0, len(a.Jobs))
	for _, j := range a.Jobs {
		r := store.ETAEstimate{JobUID: j.UID, MadeAt: a.At, State: string(j.State), PredictedRunSeconds: j.PredictedRunSecs, Nodes: j.Nodes}
		label := "never"
		if j.State == eta.Starts {
			r.P10, r.P50 = *j.P10, *j.P50
			if j.P90 != nil {
				r.P90 = *j.P90
			}
			wait := time.Duration(*j.WaitP50Secs * float64(time.Second))
			for _, b := range WaitBuckets {
				if wait <= b.Upper {
					label = b.Label
					break
				}
			}
		}
		counts[label]++
		rows = append(rows, r)
	}
	if e.Gauge != nil {
		for l, n := range counts {
			e.Gauge.WithLabelValues(l).Set(n)
		}
	}
	retention := e.Retention
	if retention <= 0 {
		retention = DefaultETARetention
	}
	if err := e.Store.InsertETAEstimates(ctx, rows, a.At.Add(-retention)); err != nil {
		return err
	}
	if e.Annotate != nil {
		// The pods of the jobs the estimate read: those created within
		// its history.
		since := a.At.Add(-cmp.Or(e.Service.History, etaserve.DefaultHistory))
		if _, err := e.Annotate.Annotate(ctx, a, since); err != nil {
			return err
		}
	}
	return nil
}
