package dcgm

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

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
// the collector's end-to-end benchmark, with the target's series cache warm
// as it is from the second scrape on: parse then sorted, the inventory only
// where the scraper has a callback for it.
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
				pp := newPageParser()
				for b.Loop() {
					set, err := pp.parse(context.Background(), c.page, contentTypeText, scrapeTime, Limits{})
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

// BenchmarkParseOpenMetricsVsText parses the same 1,000-GPU page (5 fields,
// dcgm-exporter's labels) as text and as OpenMetrics, alternating, each with
// its own warm series cache, and reports the ratio of their CPU time:
// collector_om_vs_text_parse_ratio. The parse runs on one goroutine, so the
// process's CPU time is the parse's.
func BenchmarkParseOpenMetricsVsText(b *testing.B) {
	text := exporterPage(1000)
	om := toOpenMetrics(b, text)
	textP, omP := newPageParser(), newPageParser()
	parse := func(pp *pageParser, page []byte, ct string) time.Duration {
		before := cputime.Process(b)
		set, err := pp.parse(context.Background(), page, ct, scrapeTime, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if len(set.sorted()) != 1000 {
			b.Fatal("not 1000 samples")
		}
		return cputime.Process(b) - before
	}
	parse(textP, text, contentTypeText)
	parse(omP, om, contentTypeOpenMetrics)
	var textCPU, omCPU time.Duration
	for b.Loop() {
		textCPU += parse(textP, text, contentTypeText)
		omCPU += parse(omP, om, contentTypeOpenMetrics)
	}
	b.ReportMetric(float64(textCPU.Microseconds())/float64(b.N), "text_cpu_us/page")
	b.ReportMetric(float64(omCPU.Microseconds())/float64(b.N), "om_cpu_us/page")
	b.ReportMetric(float64(omCPU)/float64(textCPU), "collector_om_vs_text_parse_ratio@ratio")
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
	if _, err := s.Collect(ctx); err != nil { // connections up, caches filled
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

// TestSeriesCacheForgetsGoneSeries: a page whose pods changed leaves the
// old pods' series behind once they outnumber the live ones, and a cached
// series gives the same samples as a fresh parse.
func TestSeriesCacheForgetsGoneSeries(t *testing.T) {
	pp := newPageParser()
	page := func(pod string) []byte {
		return fmt.Appendf(nil, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-1\",pod=%q} 5\nDCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 40\n", pod)
	}
	for i := range 10 {
		p := page(fmt.Sprint("pod-", i))
		set, err := pp.parse(context.Background(), p, contentTypeText, scrapeTime, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := ParseExporterText(p, scrapeTime)
		if err != nil {
			t.Fatal(err)
		}
		if got := set.sorted(); !slices.Equal(got, fresh) {
			t.Fatalf("page %d: cached parse %+v, fresh %+v", i, got, fresh)
		}
		if len(pp.series) > 2 {
			t.Fatalf("after page %d the cache holds %d series, want at most 2 (the unstored family is never cached)", i, len(pp.series))
		}
	}
}
