package dcgm

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/common/expfmt"

	"github.com/schedloop/schedloop/internal/cputime"
	"github.com/schedloop/schedloop/internal/harness/exporter"
)

// harnessPages renders one 8-GPU node's page as the simulated exporter
// prints it: with dcgm-exporter's default counters, and trimmed to the five
// stored fields.
func harnessPages(tb testing.TB) (def, trimmed []byte) {
	var full, five bytes.Buffer
	if err := exporter.New("node-0001", exporter.BusyNode{}).Write(&full); err != nil {
		tb.Fatal(err)
	}
	if err := exporter.New("node-0001", exporter.BusyNode{}).WithCounters(Metrics...).Write(&five); err != nil {
		tb.Fatal(err)
	}
	return full.Bytes(), five.Bytes()
}

// BenchmarkParseExporterPage is the scraper's parse step on the pages of
// the collector's end-to-end benchmark: parsePage then sorted, the
// inventory only where the scraper has a callback for it.
func BenchmarkParseExporterPage(b *testing.B) {
	def, trimmed := harnessPages(b)
	for _, c := range []struct {
		name string
		page []byte
	}{{"page=default-21-fields", def}, {"page=trimmed-5-fields", trimmed}} {
		for _, inv := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/inventory=%v", c.name, inv), func(b *testing.B) {
				b.SetBytes(int64(len(c.page)))
				b.ReportAllocs()
				for b.Loop() {
					set, err := parsePage(c.page, expfmt.FmtText, scrapeTime)
					if err != nil {
						b.Fatal(err)
					}
					if inv && len(set.inventory()) != 8 {
						b.Fatal("inventory is not 8 GPUs")
					}
					if len(set.sorted()) != 8 {
						b.Fatal("not 8 samples")
					}
				}
			})
		}
	}
}

// TestHarnessPagesTakeFastPath keeps the benchmark honest: both pages must
// parse on the fast path, to what expfmt gives.
func TestHarnessPagesTakeFastPath(t *testing.T) {
	def, trimmed := harnessPages(t)
	for _, page := range [][]byte{def, trimmed} {
		got, err, ok := parseTextFast(page, scrapeTime)
		if !ok || err != nil {
			t.Fatalf("fast path: ok %v, err %v", ok, err)
		}
		want, err := parseWithExpfmt(page, scrapeTime)
		if err != nil || !sameSamples(got, want) || len(got) != 8 {
			t.Fatalf("fast %+v\nexpfmt %+v (%v)", got, want, err)
		}
	}
}

// BenchmarkScrapeRound is one scrape round of 64 exporters of 8 GPUs each,
// served from prebuilt pages over loopback, through Collect: fetch, parse,
// sort, without the database. dcgm_scrape_cpu_us_per_page is the process's
// CPU per page, the exporters' side included: the figure that changes to the
// scrape path move (a rate moves with whatever else the machine runs).
func BenchmarkScrapeRound(b *testing.B) {
	def, _ := harnessPages(b)
	const exporters = 64
	var urls []string
	for range exporters {
		url, stop, err := exporter.ServePage(def)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(stop)
		urls = append(urls, url)
	}
	s := &ExporterScraper{Targets: StaticTargets(urls)}
	ctx := context.Background()
	if _, err := s.Collect(ctx); err != nil { // connections up, buffers grown
		b.Fatal(err)
	}
	before := cputime.Process(b)
	for b.Loop() {
		samples, err := s.Collect(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(samples) != 8*exporters {
			b.Fatalf("%d samples, want %d", len(samples), 8*exporters)
		}
	}
	b.ReportMetric(float64((cputime.Process(b)-before).Nanoseconds())/1e3/float64(b.N*exporters), "dcgm_scrape_cpu_us_per_page@us")
}
