package dcgm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/schedloop/schedloop"
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
		malformed.URL + "/metrics: parse text exposition: ",
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
	for reason, want := range map[string]float64{ReasonTimeout: 1, ReasonStatus: 1, ReasonParse: 1, ReasonFetch: 0} {
		if got := testutil.ToFloat64(metrics.errors.WithLabelValues(reason)); got != want {
			t.Errorf("scrape_errors_total{reason=%q} = %v, want %v", reason, got, want)
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
	s := &ExporterScraper{Targets: StaticTargets{srv.URL + "/metrics"}, Limits: Limits{MaxBodyBytes: 100}}
	_, err := s.Collect(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exceeds 100 bytes") || !strings.Contains(err.Error(), "(body limit)") {
		t.Errorf("error %v, want the body limit named", err)
	}
}

// scrapeOnce scrapes one target through Collect with s's settings and
// returns the samples, the error and the reason it was counted under.
func scrapeOnce(t *testing.T, s *ExporterScraper, target string) ([]schedloop.GPUSample, error, string) {
	t.Helper()
	s.Targets = StaticTargets{target}
	s.Metrics = NewScrapeMetrics()
	samples, err := s.Collect(context.Background())
	reason := ""
	for _, r := range reasons {
		if testutil.ToFloat64(s.Metrics.errors.WithLabelValues(r)) > 0 {
			reason = r
		}
	}
	return samples, err, reason
}

func TestScrapeLimits(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("testdata", "exporter", "a100-8gpu.prom"))
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(bytes.Repeat([]byte("# filler comment line\n"), 1<<16)) // 1.4 MB that packs to a few KB
	_, _ = zw.Write(page)
	_ = zw.Close()
	plain := exporterServer(t, "a100-8gpu.prom", "text/plain; version=0.0.4")
	bomb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			t.Errorf("Accept-Encoding %q: want gzip offered", r.Header.Get("Accept-Encoding"))
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(gz.Bytes())
	}))
	t.Cleanup(bomb.Close)
	series := bytes.Count(page, []byte("\nDCGM_")) // every series line follows a newline
	tests := []struct {
		name       string
		target     string
		limits     Limits
		perTarget  *Limits
		wantErr    string
		wantReason string
	}{
		{name: "defaults", target: plain.URL + "/metrics"},
		{name: "gzip decoded within the limit", target: bomb.URL, limits: Limits{MaxBodyBytes: 2 << 20}},
		{name: "gzip over the limit once decoded", target: bomb.URL, limits: Limits{MaxBodyBytes: 1 << 20},
			wantErr: "body exceeds 1048576 bytes after decoding (body limit)", wantReason: ReasonBodyLimit},
		{name: "sample limit", target: plain.URL + "/metrics", limits: Limits{SampleLimit: series - 1},
			wantErr: fmt.Sprintf("more than %d series (sample_limit)", series-1), wantReason: ReasonSampleLimit},
		{name: "sample limit exactly met", target: plain.URL + "/metrics", limits: Limits{SampleLimit: series}},
		{name: "per-target limit overrides", target: plain.URL + "/metrics", limits: Limits{SampleLimit: 1}, perTarget: &Limits{SampleLimit: series}},
		{name: "per-target body limit", target: plain.URL + "/metrics", perTarget: &Limits{MaxBodyBytes: 1000},
			wantErr: "exceeds 1000 bytes", wantReason: ReasonBodyLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &ExporterScraper{Limits: tt.limits, Now: func() time.Time { return scrapeTime }}
			if tt.perTarget != nil {
				s.TargetLimits = map[string]Limits{tt.target: *tt.perTarget}
			}
			samples, err, reason := scrapeOnce(t, s, tt.target)
			if tt.wantErr == "" {
				if err != nil || len(samples) != 8 {
					t.Fatalf("got %d samples, error %v; want the page's 8", len(samples), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
			if len(samples) != 0 {
				t.Errorf("%d samples of a failed page returned", len(samples))
			}
			if reason != tt.wantReason {
				t.Errorf("counted under reason %q, want %q", reason, tt.wantReason)
			}
		})
	}
}

func TestScrapeRedirects(t *testing.T) {
	good := exporterServer(t, "a100-8gpu.prom", "text/plain; version=0.0.4")
	same := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Header().Set("Content-Type", "text/plain")
			page, _ := os.ReadFile(filepath.Join("testdata", "exporter", "a100-8gpu.prom"))
			_, _ = w.Write(page)
			return
		}
		http.Redirect(w, r, "/metrics", http.StatusFound)
	}))
	t.Cleanup(same.Close)
	other := httptest.NewServer(http.RedirectHandler(good.URL+"/metrics", http.StatusMovedPermanently))
	t.Cleanup(other.Close)
	loop := httptest.NewServer(http.RedirectHandler("/again", http.StatusFound))
	t.Cleanup(loop.Close)

	if samples, err, _ := scrapeOnce(t, &ExporterScraper{}, same.URL+"/old"); err != nil || len(samples) != 8 {
		t.Errorf("same-host redirect: %d samples, error %v; want it followed", len(samples), err)
	}
	_, err, reason := scrapeOnce(t, &ExporterScraper{}, other.URL+"/metrics")
	if err == nil || !strings.Contains(err.Error(), "redirect to http://"+strings.TrimPrefix(good.URL, "http://")+" refused") || reason != ReasonFetch {
		t.Errorf("cross-host redirect: error %v reason %q, want it refused", err, reason)
	}
	if _, err, _ := scrapeOnce(t, &ExporterScraper{}, loop.URL+"/metrics"); err == nil || !strings.Contains(err.Error(), "stopped after 3 redirects") {
		t.Errorf("redirect loop: error %v", err)
	}
}

// rawServer answers each connection with respond, which writes raw bytes.
func rawServer(t *testing.T, respond func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				go func() { <-done; c.Close() }()
				_, _ = bufio.NewReader(c).ReadString('\n')
				respond(c)
			})
		}
	})
	return "http://" + ln.Addr().String() + "/metrics"
}

// TestScrapeHostileTargets: targets that misuse HTTP fail their own scrape
// quickly, named, and leave nothing behind.
func TestScrapeHostileTargets(t *testing.T) {
	page, _ := os.ReadFile(filepath.Join("testdata", "exporter", "a100-8gpu.prom"))
	const head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
	tests := []struct {
		name    string
		respond func(c net.Conn)
		wantErr string
	}{
		{"chunk-extension flood", func(c net.Conn) {
			_, _ = io.WriteString(c, head)
			ext := ";" + strings.Repeat("x", 4000)
			for range 2000 { // 8 MB of extensions around 1-byte chunks
				if _, err := io.WriteString(c, "1"+ext+"\r\nD\r\n"); err != nil {
					return
				}
			}
		}, "too much non-data"},
		{"endless 100 Continue", func(c net.Conn) {
			for {
				if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
					return
				}
			}
		}, "too many 1xx|response headers exceeded"},
		{"huge header", func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Filler: "+strings.Repeat("a", 1<<20)+"\r\n\r\n")
		}, "server response headers exceeded"},
		{"chunked body longer than the limit", func(c net.Conn) {
			_, _ = io.WriteString(c, head)
			for range 100 {
				if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(page), page); err != nil {
					return
				}
			}
		}, "body limit"},
		{"truncated chunk", func(c net.Conn) {
			_, _ = io.WriteString(c, head+"ffff\r\n"+string(page[:100]))
		}, "unexpected EOF"},
		{"not HTTP", func(c net.Conn) {
			_, _ = io.WriteString(c, "SSH-2.0-OpenSSH_9.6\r\n")
		}, "malformed HTTP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := rawServer(t, tt.respond)
			start := time.Now()
			samples, err, _ := scrapeOnce(t, &ExporterScraper{Timeout: 5 * time.Second, Limits: Limits{MaxBodyBytes: 1 << 20}}, target)
			if err == nil || !regexp.MustCompile(tt.wantErr).MatchString(err.Error()) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
			if len(samples) != 0 {
				t.Errorf("%d samples of a failed page", len(samples))
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("took %v: the client should give up on its own, not at the deadline", d)
			}
		})
	}
}

// TestParseStopsWithContext: the deadline covers the parse too, so a huge
// page cannot hold a scrape past it.
func TestParseStopsWithContext(t *testing.T) {
	page := exporterPage(4000)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newPageParser().parse(ctx, page, contentTypeText, scrapeTime, Limits{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("parse with an ended context: %v, want context.Canceled", err)
	}
}

// TestRunTargetsOnTheirOwnClocks: beside a target that never answers and
// one that answers slowly, a good target keeps its interval, and ending the
// context stops every loop at once, mid-scrape included.
func TestRunTargetsOnTheirOwnClocks(t *testing.T) {
	good := exporterServer(t, "a100-8gpu.prom", "text/plain; version=0.0.4")
	stuck := rawServer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	trickle := rawServer(t, func(c net.Conn) {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
		for {
			if _, err := c.Write([]byte("#")); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	const every = 100 * time.Millisecond
	var mu sync.Mutex
	perNode := map[string]int{}
	s := &ExporterScraper{Targets: StaticTargets{good.URL + "/metrics", stuck, trickle}, Timeout: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- s.Run(ctx, every, func(samples []schedloop.GPUSample) {
			mu.Lock()
			defer mu.Unlock()
			perNode[samples[0].Node]++
		})
	}()
	time.Sleep(20*every + every/2)
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5 s of its context ending")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Run took %v to stop", d)
	}
	mu.Lock()
	defer mu.Unlock()
	// 20 intervals, the first scrape somewhere in the first: 19 or 20
	// pages (one may be in flight at the end); a scraper that waited for
	// the stuck targets would have one.
	if n := perNode["node-1"]; n < 18 {
		t.Errorf("good target scraped %d times in 20 intervals beside stuck ones", n)
	}
}
