package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/etaserve"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/store"
)

// DefaultScrapeEvery is the scrape interval when none is given: 15 s, as
// Prometheus scrapes by default.
const DefaultScrapeEvery = 15 * time.Second

// ErrSpool is a spool directory the ingester cannot use.
var ErrSpool = errors.New("ingest spool")

// PipelineConfig says what a Pipeline runs. Zero fields take the components'
// defaults.
type PipelineConfig struct {
	Store *store.Store
	// Scraper, when set, scrapes each of its targets every ScrapeEvery on the
	// target's own clock (ExporterScraper.Run); the pipeline's GPU inventory
	// is hooked to it unless it has an Inventory callback already.
	Scraper *dcgm.ExporterScraper
	// Sources are further telemetry sources (a DCGM host engine), scraped
	// on the same interval; SourcesStopped runs once every source has. A
	// source that is a dcgm.InventoryReporter feeds the GPU inventory.
	Sources        []Source
	SourcesStopped func()
	// ScrapeEvery is the pause between scrapes; default DefaultScrapeEvery.
	ScrapeEvery time.Duration
	// Ingest tunes the ingester; its Metrics, Logger and OnWritten are the
	// pipeline's, Permanent defaults to store.Permanent, MaxAge and MaxAhead
	// to DefaultMaxSampleAge and DefaultMaxSampleAhead, and Now to RollupNow.
	Ingest IngestOptions
	// Rollups: see Roller. RollupNow is the clock minutes are closed by (trace
	// time in a replay).
	RollupThreshold                           float64
	RollupEvery, RollupLateness, RollupWindow time.Duration
	RollupNow                                 func() time.Time
	InventoryEvery                            time.Duration
	// ETAEvery is how often every pending job's start is estimated and
	// stored (Estimator); zero means DefaultETAEvery, negative none. It
	// runs beside the rollups, on the replica that rolls up.
	ETAEvery time.Duration
	// ETADebounce is the Estimator's Debounce: how long after a pod's
	// creation, binding or end (seen by the watcher) or a profile applied
	// the estimates are made again.
	ETADebounce time.Duration
	// ETAAnnotateQPS, when positive and Watch is set, has the Estimator
	// write each estimate onto the waiting pods (Annotator), at most this
	// many patches a second.
	ETAAnnotateQPS float64
	// Watch, when set, runs the cluster watcher with these options; its
	// Store and Logger are the pipeline's.
	Watch *events.WatchOptions
	// Elect, when set, runs lead while this replica is the active one
	// (election.Run on a Lease, say) until its context ends. Telemetry and
	// the rollups run only inside lead; the ingester, the GPU inventory and
	// the cluster watcher run on every replica, so a standby's informers
	// are listed and its watcher stores what it sees (those writes are
	// idempotent), and a takeover leaves no hole in the cluster's history.
	Elect func(ctx context.Context, lead func(ctx context.Context)) error
	// Registerer receives every component's metrics; nil registers none.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Pipeline is the collector as one running thing: telemetry scraped into the
// ingester, the GPU inventory, the rollups and the cluster watcher.
// `collector serve` runs it, the demo runs it, and the end-to-end tests run it
// on trace time, so all three run the same wiring.
type Pipeline struct {
	Metrics   *Metrics
	Ingester  *Ingester
	Roller    *Roller
	Estimator *Estimator // nil when ETAEvery is negative
	Inventory *Inventory
	Watcher   *events.Watcher // nil without Watch

	sources    int
	cancel     context.CancelFunc
	stopScrape context.CancelFunc
	scraped    chan struct{} // closed once the sources and the inventory have stopped
	wg         sync.WaitGroup
	mu         sync.Mutex
	errs       []error
}

// StartPipeline builds the components, registers their metrics and starts
// them. They run until ctx ends; the ingester outlives the sources, so their
// last samples are stored or spooled before Wait returns.
func StartPipeline(ctx context.Context, cfg PipelineConfig) (*Pipeline, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := NewMetrics()
	ctx, cancel := context.WithCancel(ctx)
	p := &Pipeline{Metrics: m, scraped: make(chan struct{}), cancel: cancel}
	started := false
	defer func() {
		if !started {
			cancel()
		}
	}()
	p.Roller = &Roller{Store: cfg.Store, Threshold: cfg.RollupThreshold, Every: cfg.RollupEvery, Lateness: cfg.RollupLateness,
		Window: cfg.RollupWindow, Now: cfg.RollupNow, Metrics: m, Logger: log}
	opts := cfg.Ingest
	opts.Metrics, opts.Logger, opts.OnWritten = m, log, p.Roller.Written
	if opts.Permanent == nil {
		opts.Permanent = store.Permanent
	}
	if opts.MaxAge == 0 && opts.MaxAhead == 0 {
		opts.MaxAge, opts.MaxAhead = DefaultMaxSampleAge, DefaultMaxSampleAhead
	}
	if opts.Now == nil {
		// Samples are stamped on the clock minutes are closed by (trace
		// time in a replay).
		opts.Now = cfg.RollupNow
	}
	ing, err := NewIngester(cfg.Store, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSpool, err)
	}
	p.Ingester = ing
	p.Inventory = &Inventory{Store: cfg.Store, Every: cfg.InventoryEvery, Logger: log}
	collectors := append(m.Collectors(), ing.Collectors()...)
	if cfg.ETAEvery >= 0 {
		p.Estimator = &Estimator{Service: &etaserve.Service{Store: cfg.Store, Now: cfg.RollupNow}, Store: cfg.Store,
			Every: cfg.ETAEvery, Debounce: cfg.ETADebounce, Gauge: NewPendingByWaitGauge(), Logger: log}
		collectors = append(collectors, p.Estimator.Gauge)
		if cfg.Watch != nil && cfg.ETAAnnotateQPS > 0 {
			p.Estimator.Annotate = NewAnnotator(cfg.Watch.Client, cfg.Store, cfg.ETAAnnotateQPS)
		}
	}
	sources := slices.Clone(cfg.Sources)
	for _, src := range sources {
		// The host engine reports its GPUs and instances as the scraper
		// reports its pages'.
		if r, ok := src.(dcgm.InventoryReporter); ok {
			r.SetInventory(p.Inventory.Observe)
		}
	}
	if sc := cfg.Scraper; sc != nil {
		if sc.Inventory == nil {
			sc.Inventory = p.Inventory.Observe
		}
		if sc.Metrics == nil {
			sc.Metrics = dcgm.NewScrapeMetrics()
		}
		if sc.Logger == nil {
			sc.Logger = log
		}
		collectors = append(collectors, sc.Metrics)
	}
	if cfg.Watch != nil {
		wo := *cfg.Watch
		wo.Store, wo.Logger = cfg.Store, log
		if p.Estimator != nil {
			// Pods created, bound or ended change every pending job's
			// estimate: recompute then, not only on the schedule.
			wo.PodsChanged = p.Estimator.Changed
		}
		if p.Watcher, err = events.NewWatcher(wo); err != nil {
			return nil, err
		}
		collectors = append(collectors, p.Watcher.Collectors()...)
	}
	if cfg.Registerer != nil {
		for _, c := range collectors {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register collector metrics: %w", err)
			}
		}
	}
	p.sources = len(sources)
	if cfg.Scraper != nil {
		p.sources++
	}

	run := func(name string, f func() error) {
		p.wg.Go(func() {
			if err := f(); err != nil {
				p.mu.Lock()
				p.errs = append(p.errs, fmt.Errorf("%s: %w", name, err))
				p.mu.Unlock()
			}
		})
	}
	// Sources stop with ctx or StopTelemetry; then the inventory writes
	// what they last reported, and the ingester stores what they scraped.
	scrapeCtx, stopScrape := context.WithCancel(ctx)
	p.stopScrape = stopScrape
	invCtx, stopInventory := context.WithCancel(context.Background())
	ingCtx, stopIngest := context.WithCancel(context.Background())
	every := cfg.ScrapeEvery
	if every <= 0 {
		every = DefaultScrapeEvery
	}
	add := ing.Add
	if p.Watcher != nil {
		// GPUs handed out through DRA are not in the exporters' or the
		// host engine's device-plugin view: their samples come without a
		// pod, which the watcher knows from the pods' claims.
		w := p.Watcher
		add = func(samples []schedloop.GPUSample) {
			owners, _ := w.GPUOwners(ctx)
			ing.Add(dcgm.Attribute(samples, owners, nil))
		}
		for i, src := range sources {
			sources[i] = &dcgm.AttributedSource{Source: src, Owners: w}
		}
	}
	telemetry := func(ctx context.Context) {
		var scrapers sync.WaitGroup
		if sc := cfg.Scraper; sc != nil {
			// Each exporter on its own clock, its page handed to the
			// ingester as soon as it is parsed; the ingester's flush
			// interval batches them.
			scrapers.Go(func() { _ = sc.Run(ctx, every, add) })
		}
		for _, src := range sources {
			scrapers.Go(func() { _ = Scrape(ctx, src, every, ing, log) })
		}
		scrapers.Wait()
	}
	inventoryDone := make(chan struct{})
	run("GPU inventory", func() error { defer close(inventoryDone); return p.Inventory.Run(invCtx) })
	run("ingest", func() error { return ing.Run(ingCtx) })
	p.wg.Go(func() {
		if cfg.Elect == nil {
			m.Leader.Set(1)
			telemetry(scrapeCtx)
		} else if err := cfg.Elect(scrapeCtx, func(lctx context.Context) {
			// Only the replica holding the Lease scrapes and rolls up:
			// samples are not idempotent, so two scraping replicas would
			// store each scrape twice.
			log.Info("holding the collector Lease: scraping telemetry and rolling up")
			m.Leader.Set(1)
			defer m.Leader.Set(0)
			var roller sync.WaitGroup
			roller.Go(func() { _ = p.Roller.Run(lctx) })
			if p.Estimator != nil {
				roller.Go(func() { _ = p.Estimator.Run(lctx) })
			}
			telemetry(lctx)
			roller.Wait()
			log.Info("collector Lease lost or released: telemetry stopped")
		}); err != nil {
			p.mu.Lock()
			p.errs = append(p.errs, fmt.Errorf("leader election: %w", err))
			p.mu.Unlock()
		}
		if cfg.SourcesStopped != nil {
			cfg.SourcesStopped()
		}
		stopInventory()
		<-inventoryDone
		close(p.scraped)
		stopIngest()
	})
	if cfg.Elect == nil {
		run("rollup", func() error { return p.Roller.Run(ctx) })
		if p.Estimator != nil {
			run("wait estimates", func() error { return p.Estimator.Run(ctx) })
		}
	}
	if p.Watcher != nil {
		run("cluster watcher", func() error { return p.Watcher.Run(ctx) })
	}
	started = true
	return p, nil
}

// Sources is the number of telemetry sources scraped.
func (p *Pipeline) Sources() int { return p.sources }

// Ready says why the collection cannot serve yet: the cluster watcher's
// informers have not listed every object (history written before that would
// miss pods). Telemetry needs no warm-up.
func (p *Pipeline) Ready() error {
	if p.Watcher != nil && !p.Watcher.Synced() {
		return errors.New("cluster watcher: informers have not listed Pods, Events, Nodes and PodGroups yet")
	}
	return nil
}

// StopTelemetry stops scraping and writes the GPU inventory one last time;
// the ingester goes on until what was scraped is stored (see Stored), and
// the rollups and the watcher until the pipeline's context ends.
func (p *Pipeline) StopTelemetry() {
	p.stopScrape()
	<-p.scraped
}

// Stored says every sample scraped so far is settled: in Postgres, or
// dropped and counted because Postgres refused it or there was no room for
// it (a spooled batch found already stored counts as stored).
func (p *Pipeline) Stored() bool {
	m := p.Metrics
	settled := counterValue(m.Written) + counterValue(m.Duplicates) +
		counterValue(m.Dropped.WithLabelValues(DropRejected)) + counterValue(m.Dropped.WithLabelValues(DropBufferFull)) +
		counterValue(m.Dropped.WithLabelValues(DropSpoolRead))
	_, spooled := p.Ingester.spool.stats()
	return p.Ingester.Buffered() == 0 && spooled == 0 && settled == counterValue(m.Received)
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// Stop ends the pipeline as the end of its context does, then waits for it.
func (p *Pipeline) Stop() error {
	p.cancel()
	return p.Wait()
}

// Wait blocks until every component has stopped (the pipeline's context has
// ended) and returns what failed while running.
func (p *Pipeline) Wait() error {
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.errs...)
}
