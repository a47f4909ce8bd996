package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
// cluster watcher, a scraper of the nodes' dcgm-exporters with the GPU
// inventory, the ingester and the rollups.
type collection struct {
	pipe *collector.Pipeline
	reg  *prometheus.Registry
}

// rollupEvery and rollupLateness keep the dashboard and the summary close
// behind the replay.
const (
	rollupEvery    = 10 * time.Second
	rollupLateness = 3 * time.Second
)

func startCollection(ctx context.Context, s *store.Store, client kubernetes.Interface, dyn dynamic.Interface,
	exporters []string, scrapeEvery time.Duration, log *slog.Logger) (*collection, error) {
	c := &collection{reg: prometheus.NewRegistry()}
	pipe, err := collector.StartPipeline(ctx, collector.PipelineConfig{Store: s,
		Scraper:     &dcgm.ExporterScraper{Targets: dcgm.StaticTargets(exporters), Timeout: min(scrapeEvery, dcgm.DefaultScrapeTimeout)},
		ScrapeEvery: scrapeEvery, RollupEvery: rollupEvery, RollupLateness: rollupLateness,
		Watch: &events.WatchOptions{Client: client, Dynamic: dyn}, Registerer: c.reg, Logger: log})
	if err != nil {
		return nil, err
	}
	c.pipe = pipe
	return c, nil
}

// rollup rolls every closed minute not yet final into the idle tables; the
// periodic passes wait for it.
func (c *collection) rollup(ctx context.Context) error { return c.pipe.Roller.Once(ctx) }

// close stops every component and returns what failed while running.
func (c *collection) close() error { return c.pipe.Stop() }

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
