package dcgm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// exporterServer serves a testdata page the way dcgm-exporter does.
func exporterServer(t *testing.T, file, contentType string) *httptest.Server {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("testdata", "exporter", file))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(page)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestExporterScraperCollect(t *testing.T) {
	const textType = "text/plain; version=0.0.4; charset=utf-8"
	good := exporterServer(t, "a100-8gpu.prom", textType)
	om := exporterServer(t, "l40s.om.txt", "application/openmetrics-text; version=1.0.0; charset=utf-8")
	malformed := exporterServer(t, "malformed-value.prom", textType)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "DCGM not ready", http.StatusServiceUnavailable)
	}))
	t.Cleanup(failing.Close)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })

	metrics := NewScrapeMetrics()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(metrics); err != nil {
		t.Fatal(err)
	}
	s := &ExporterScraper{
		Targets: StaticTargets{
			good.URL + "/metrics", om.URL + "/metrics", malformed.URL + "/metrics",
			failing.URL + "/metrics", slow.URL + "/metrics", good.URL + "/metrics",
		},
		Timeout:     200 * time.Millisecond,
		Concurrency: 2,
		Now:         func() time.Time { return scrapeTime },
		Metrics:     metrics,
	}
	samples, err := s.Collect(context.Background())

	if got, want := len(samples), 8+2; got != want {
		t.Errorf("got %d samples, want %d (8 from the text page, 2 from OpenMetrics; the duplicate target scraped once)", got, want)
	}
	for _, smp := range samples {
		if !smp.Time.Equal(scrapeTime) {
			t.Errorf("sample %s stamped %v, want the injected clock %v", smp.GPUUUID, smp.Time, scrapeTime)
		}
	}
	if err == nil {
		t.Fatal("want an error naming the failed targets")
	}
	for _, want := range []string{
		malformed.URL + "/metrics: parse text exposition: text format parsing error in line 4",
		failing.URL + "/metrics: HTTP status 503",
		slow.URL + "/metrics",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	var te *TargetError
	if !errors.As(err, &te) {
		t.Errorf("error %v holds no *TargetError", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v: want the slow target's deadline in the chain", err)
	}

	if got := testutil.ToFloat64(metrics.scrapes); got != 5 {
		t.Errorf("scrapes_total = %v, want 5", got)
	}
	for stage, want := range map[string]float64{stageFetch: 1, stageStatus: 1, stageParse: 1} {
		if got := testutil.ToFloat64(metrics.errors.WithLabelValues(stage)); got != want {
			t.Errorf("scrape_errors_total{stage=%q} = %v, want %v", stage, got, want)
		}
	}
	if got := testutil.ToFloat64(metrics.samples); got != 10 {
		t.Errorf("samples_total = %v, want 10", got)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gather metrics: %v", err)
	}
}

func TestExporterScraperCancelled(t *testing.T) {
	srv := exporterServer(t, "a100-8gpu.prom", "text/plain; version=0.0.4")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := &ExporterScraper{Targets: StaticTargets{srv.URL + "/metrics"}}
	_, err := s.Collect(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Collect with a cancelled context: error %v, want context.Canceled", err)
	}
}

func TestExporterScraperBodyLimit(t *testing.T) {
	srv := exporterServer(t, "a100-8gpu.prom", "text/plain; version=0.0.4")
	s := &ExporterScraper{Targets: StaticTargets{srv.URL + "/metrics"}, MaxBodyBytes: 100}
	_, err := s.Collect(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exceeds 100 bytes") {
		t.Errorf("error %v, want the body limit named", err)
	}
}
