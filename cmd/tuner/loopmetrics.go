package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Outcomes of one pass of the loop, the values of runs_total's label.
const (
	passTuned   = "tuned"   // the applied profile was measured and a tuning pass ran
	passWaiting = "waiting" // the applied profile has not run -measure-after yet
	passError   = "error"   // checking the applied profile or tuning failed
)

// loopMetrics is what the loop tells Prometheus, on its own registry so that
// a test's loops do not share counters.
type loopMetrics struct {
	reg          *prometheus.Registry
	runs         *prometheus.CounterVec
	lastRun      prometheus.Gauge
	lastDuration prometheus.Gauge
	leader       prometheus.Gauge
}

func newLoopMetrics() *loopMetrics {
	m := &loopMetrics{
		reg: prometheus.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "schedloop_tuner_runs_total",
			Help: "Passes of the tuner loop by outcome: tuned, waiting (the applied profile is still being measured) or error."},
			[]string{"outcome"}),
		lastRun: prometheus.NewGauge(prometheus.GaugeOpts{Name: "schedloop_tuner_last_run_timestamp_seconds",
			Help: "Unix time at which the last pass of the tuner loop started; 0 before the first."}),
		lastDuration: prometheus.NewGauge(prometheus.GaugeOpts{Name: "schedloop_tuner_last_run_duration_seconds",
			Help: "How long the last pass of the tuner loop took."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "schedloop_tuner_leader",
			Help: "1 while this replica holds the tuner's Lease and runs the loop, else 0."}),
	}
	for _, o := range []string{passTuned, passWaiting, passError} {
		m.runs.WithLabelValues(o) // present at 0, so rate() and alerts see the series before the first pass
	}
	m.reg.MustRegister(m.runs, m.lastRun, m.lastDuration, m.leader,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// pass records one pass that started at start (the loop's clock) and took took.
func (m *loopMetrics) pass(outcome string, start time.Time, took time.Duration) {
	m.runs.WithLabelValues(outcome).Inc()
	m.lastRun.Set(float64(start.UnixNano()) / 1e9)
	m.lastDuration.Set(took.Seconds())
}

func (m *loopMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// serve serves /metrics on addr until ctx ends. It listens before it returns,
// so a bad -metrics-addr fails the command at start rather than later.
func (m *loopMetrics) serve(ctx context.Context, addr string, stderr io.Writer) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("flag -metrics-addr: listen on %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.handler())
	fmt.Fprintf(stderr, "tuner loop: metrics on http://%s/metrics\n", ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) && ctx.Err() == nil {
			fmt.Fprintln(stderr, "tuner loop: metrics server:", err)
		}
	}()
	return func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
		<-done
	}, nil
}
