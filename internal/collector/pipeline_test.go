package collector_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/harness/exporter"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestPipelineStoresWhatItScrapedAfterTelemetryStops: StopTelemetry ends the
// scraping, the GPU inventory is written after the last scrape, and the
// ingester goes on until every sample scraped is in Postgres.
func TestPipelineStoresWhatItScrapedAfterTelemetryStops(t *testing.T) {
	var page bytes.Buffer
	if err := exporter.New("node-a", exporter.BusyNode{}).Write(&page); err != nil {
		t.Fatal(err)
	}
	s := storetest.New(t)
	reg := prometheus.NewPedanticRegistry()
	pipe, err := collector.StartPipeline(context.Background(), collector.PipelineConfig{Store: s,
		Scraper:     &dcgm.ExporterScraper{Targets: dcgm.StaticTargets{serveLikeDCGMExporter(t, page.Bytes())}},
		ScrapeEvery: 20 * time.Millisecond, Ingest: collector.IngestOptions{FlushInterval: 10 * time.Millisecond},
		InventoryEvery: time.Hour, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Stop()
	if err := pipe.Ready(); err != nil {
		t.Errorf("ready without a cluster watcher: %v", err)
	}
	if pipe.Sources() != 1 {
		t.Errorf("%d telemetry sources, want the scraper", pipe.Sources())
	}
	deadline := time.Now().Add(20 * time.Second)
	for testutil.ToFloat64(pipe.Metrics.Received) < 5*8 {
		if time.Now().After(deadline) {
			t.Fatal("no five scrapes in 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pipe.StopTelemetry()
	received := testutil.ToFloat64(pipe.Metrics.Received)
	for !pipe.Stored() {
		if time.Now().After(deadline) {
			t.Fatalf("%v of %v samples stored after 20 s", testutil.ToFloat64(pipe.Metrics.Written), received)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // two scrape intervals: none may come
	if got := testutil.ToFloat64(pipe.Metrics.Received); got != received {
		t.Errorf("%v samples received after StopTelemetry, want none", got-received)
	}
	ctx := context.Background()
	n, err := s.CountGPUSamples(ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if float64(n) != received {
		t.Errorf("%d samples in Postgres, %v scraped", n, received)
	}
	// The inventory writes every hour here, so the node's GPUs can only
	// have been stored by its final write, made when telemetry stopped.
	gpus, err := s.ListGPUs(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 8 {
		t.Errorf("%d GPUs of node-a stored, want 8", len(gpus))
	}
	if err := pipe.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	if got := testutil.CollectAndCount(reg, "schedloop_collector_samples_written_total"); got != 1 {
		t.Errorf("written counter registered %d times, want once", got)
	}
}

// TestPipelineNamesAnUnusableSpool: the error says it is the spool, so the
// command can name its flag.
func TestPipelineNamesAnUnusableSpool(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-directory")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := collector.StartPipeline(context.Background(), collector.PipelineConfig{Store: storetest.New(t),
		Ingest: collector.IngestOptions{SpoolDir: file}})
	if !errors.Is(err, collector.ErrSpool) {
		t.Fatalf("error %v, want ErrSpool", err)
	}
}

// eofSignal closes parsing once a response body of its target has been read
// to the end: from then on the scraper is parsing that page.
type eofSignal struct {
	rt      http.RoundTripper
	target  string
	parsing chan struct{}
	once    sync.Once
}

func (e *eofSignal) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := e.rt.RoundTrip(req)
	if err == nil && req.URL.String() == e.target {
		resp.Body = &eofBody{ReadCloser: resp.Body, eof: func() { e.once.Do(func() { close(e.parsing) }) }}
	}
	return resp, err
}

type eofBody struct {
	io.ReadCloser
	eof func()
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof()
	}
	return n, err
}

// TestPipelineStopsMidParseWithinGrace: ending the pipeline's context (what
// SIGTERM does to collector serve) while an 11.7 MB OpenMetrics page is being
// parsed and another target trickles its page stops everything within the
// 10 s a pod's grace leaves, stores what was already parsed, and stores
// nothing of the page cut short.
func TestPipelineStopsMidParseWithinGrace(t *testing.T) {
	urls, stop, err := exporter.Farm{Nodes: 2, HugeOpenMetricsGPUs: 16_000, Trickle: true}.Serve()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	huge := urls[2]
	signal := &eofSignal{rt: dcgm.NewClient().Transport, target: huge, parsing: make(chan struct{})}
	s := storetest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scraper := &dcgm.ExporterScraper{Targets: dcgm.StaticTargets(urls), Client: &http.Client{Transport: signal}}
	pipe, err := collector.StartPipeline(ctx, collector.PipelineConfig{Store: s, Scraper: scraper, ScrapeEvery: 5 * time.Second,
		Ingest: collector.IngestOptions{FlushInterval: 20 * time.Millisecond, SpoolDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-signal.parsing:
	case <-time.After(20 * time.Second):
		t.Fatal("the huge page was not read within 20 s")
	}
	cancel()
	began := time.Now()
	if err := pipe.Wait(); err != nil {
		t.Errorf("pipeline: %v", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("stopped %v after its context ended, past a 10 s grace", d)
	}
	received, written, spooled := testutil.ToFloat64(pipe.Metrics.Received), testutil.ToFloat64(pipe.Metrics.Written), testutil.ToFloat64(pipe.Metrics.Spooled)
	if received != written+spooled {
		t.Errorf("received %v samples, stored %v and spooled %v: some were lost", received, written, spooled)
	}
	var hugeRows int
	if err := s.Pool().QueryRow(context.Background(), `SELECT count(*) FROM gpu_samples WHERE node = 'huge-node'`).Scan(&hugeRows); err != nil {
		t.Fatal(err)
	}
	canceled := testutil.ToFloat64(scraper.Metrics.Errors().WithLabelValues(dcgm.ReasonCanceled))
	switch {
	case hugeRows == 0 && canceled >= 1:
		// The parse was cut short and left nothing behind.
	case hugeRows == 16_000:
		t.Logf("the huge page's parse finished before the context ended; it was stored whole")
	default:
		t.Errorf("%d of the huge page's 16,000 samples stored (canceled scrapes: %v): a page is stored whole or not at all", hugeRows, canceled)
	}
}
