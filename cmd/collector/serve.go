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
	if err := collect.validate(); err != nil {
		return err
	}
	if err := apiOpts.validate(); err != nil {
		return err
	}
	// The collector starts while Postgres is away, so that what it scrapes
	// is kept (in memory, then -spool-dir) rather than never collected.
	s, schemaReady, err := db.OpenLater(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	// The API reads through a pool of its own, as large as the number of
	// requests it answers at once: a read storm waits for those connections
	// and never for the ones ingest writes through.
	reads, err := store.Open(ctx, db.URL, store.Options{MaxConns: int32(apiOpts.MaxConcurrent), ConnectTimeout: db.ConnectTimeout, Lazy: true})
	if err != nil {
		return err
	}
	defer reads.Close()
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
	// An answer has QueueWait to start and Timeout for its reads; the write
	// timeout leaves it time to be sent after that, and then cuts off a
	// client that reads too slowly to hold the connection forever.
	ready := func() error {
		select {
		case <-schemaReady:
		default:
			return errors.New("database schema: not prepared yet (Postgres was away at start-up)")
		}
		return pipe.Ready()
	}
	srv := &http.Server{Handler: newRouter(s, reads, apiOpts.options(), reg, ready, stderr),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: apiOpts.QueueWait + apiOpts.Timeout + 30*time.Second, IdleTimeout: 2 * time.Minute}
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

// newRouter serves the API and the dashboard (reading through reads) and the
// probes; ready reports what keeps the collection from being ready (nil:
// ready).
func newRouter(s, reads *store.Store, apiOpts api.Options, reg *prometheus.Registry, ready func() error, log io.Writer) http.Handler {
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
			// The error names the database's host and user: it goes to the
			// log, not to whoever can reach the probe.
			fmt.Fprintf(log, "readyz: database: %v\n", err)
			c.String(http.StatusServiceUnavailable, "database: not answering (the collector's log says why)")
			return
		}
		if err := ready(); err != nil {
			c.String(http.StatusServiceUnavailable, "%v", err)
			return
		}
		c.String(http.StatusOK, "ok")
	})
	mountDashboard(r, reads, apiOpts)
	return r
}
