package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/web"
)

// collection is the collector pipeline as `collector serve` runs it: the
// cluster watcher, a scraper of the nodes' dcgm-exporters, the ingester and
// the rollups. Rollups run from one goroutine-safe entry point, so the
// demo's final pass never races the periodic one.
type collection struct {
	roller *collector.Roller
	rollMu sync.Mutex
	reg    *prometheus.Registry

	stop func()
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

// rollupEvery and rollupLateness keep the dashboard and the summary close
// behind the replay.
const (
	rollupEvery    = 10 * time.Second
	rollupLateness = 3 * time.Second
)

func startCollection(ctx context.Context, s *store.Store, client kubernetes.Interface, dyn dynamic.Interface,
	exporters []string, scrapeEvery time.Duration, log *slog.Logger) (*collection, error) {
	m := collector.NewMetrics()
	c := &collection{reg: prometheus.NewRegistry()}
	c.roller = &collector.Roller{Store: s, Every: rollupEvery, Lateness: rollupLateness, Metrics: m, Logger: log}
	ing, err := collector.NewIngester(s, collector.IngestOptions{Permanent: store.Permanent, OnWritten: c.roller.Written, Logger: log, Metrics: m})
	if err != nil {
		return nil, err
	}
	watcher, err := events.NewWatcher(events.WatchOptions{Client: client, Dynamic: dyn, Store: s, Logger: log})
	if err != nil {
		return nil, err
	}
	sm := dcgm.NewScrapeMetrics()
	scraper := &dcgm.ExporterScraper{Targets: dcgm.StaticTargets(exporters), Metrics: sm, Timeout: min(scrapeEvery, dcgm.DefaultScrapeTimeout)}
	cols := append(append(m.Collectors(), ing.Collectors()...), watcher.Collectors()...)
	for _, col := range append(cols, sm) {
		if err := c.reg.Register(col); err != nil {
			return nil, fmt.Errorf("register collector metrics: %w", err)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	ingCtx, stopIngest := context.WithCancel(context.Background())
	c.stop = cancel
	run := func(name string, f func() error) {
		c.wg.Go(func() {
			if err := f(); err != nil && ctx.Err() == nil {
				c.mu.Lock()
				c.errs = append(c.errs, fmt.Errorf("%s: %w", name, err))
				c.mu.Unlock()
			}
		})
	}
	// The ingester outlives the scraper so its last samples are stored.
	run("ingest", func() error { return ing.Run(ingCtx) })
	c.wg.Go(func() {
		_ = collector.Scrape(ctx, scraper, scrapeEvery, ing, log)
		stopIngest()
	})
	run("cluster watcher", func() error { return watcher.Run(ctx) })
	run("rollup", func() error {
		t := time.NewTicker(rollupEvery)
		defer t.Stop()
		for {
			if err := c.rollup(ctx); err != nil && ctx.Err() == nil {
				log.Warn("rollup failed; retried next pass", "err", err)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
	return c, nil
}

// rollup rolls every closed minute not yet final into the idle tables.
func (c *collection) rollup(ctx context.Context) error {
	c.rollMu.Lock()
	defer c.rollMu.Unlock()
	return c.roller.Once(ctx)
}

// close stops every component and returns what failed while running.
func (c *collection) close() error {
	c.stop()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.errs...)
}

// serveDashboard serves the dashboard, the JSON API and /metrics on ln
// until ctx ends.
func serveDashboard(ctx context.Context, ln net.Listener, s *store.Store, reg *prometheus.Registry) (wait func() error) {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	api.Register(r, s, api.Options{Cluster: "demo"})
	r.NoRoute(gin.WrapH(web.Handler()))
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	return func() error {
		<-stopped
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("dashboard server: %w", err)
		}
		return nil
	}
}
