package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/dbflags"
	"github.com/schedloop/schedloop/internal/store"
)

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("collector serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := dbflags.Register(fs, getenv)
	db.RegisterAutoMigrate(fs)
	listen := fs.String("listen", ":8080", "address for HTTP: /healthz, /readyz, /metrics, the dashboard and /api/v1")
	apiOpts := registerAPIFlags(fs, getenv)
	collect := registerCollectFlags(fs, getenv)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: collector serve [flags]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	s, err := db.Open(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()

	if err := collect.validate(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s (flag -listen): %w", *listen, err)
	}
	reg := prometheus.NewRegistry()
	collectCtx, stopCollect := context.WithCancel(ctx)
	defer stopCollect()
	pipe, err := collect.start(collectCtx, s, reg, getenv("NODE_NAME"), stderr)
	if err != nil {
		ln.Close()
		return err
	}
	defer func() {
		stopCollect()
		if err := pipe.Wait(); err != nil {
			fmt.Fprintf(stderr, "collection stopped with errors: %v\n", err)
		}
	}()
	srv := &http.Server{Handler: newRouter(s, *apiOpts, reg, pipe.Ready), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "collector listening on http://%s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shut down http server: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", err)
	}
	return nil
}

// newRouter serves the API, the dashboard and the probes; ready reports what
// keeps the collection from being ready (nil: ready).
func newRouter(s *store.Store, apiOpts api.Options, reg *prometheus.Registry, ready func() error) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())

	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	r.GET("/readyz", func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
		defer cancel()
		if err := s.Ping(ctx); err != nil {
			c.String(http.StatusServiceUnavailable, "database: %v", err)
			return
		}
		if err := ready(); err != nil {
			c.String(http.StatusServiceUnavailable, "%v", err)
			return
		}
		c.String(http.StatusOK, "ok")
	})
	mountDashboard(r, s, apiOpts)
	return r
}
