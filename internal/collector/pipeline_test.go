package collector_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
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
