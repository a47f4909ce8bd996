package collector_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/player"
	"github.com/schedloop/schedloop/internal/procmem"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
	"github.com/schedloop/schedloop/internal/trace"
)

var (
	soakDuration = flag.Duration("soak.duration", 30*time.Minute, "how long BenchmarkSoak runs the loop under faults")
	soakSpeed    = flag.Float64("soak.speed", 120, "trace seconds per wall second of BenchmarkSoak's replay")
	soakTimeout  = flag.Duration("soak.scrape-timeout", soakScrape, "BenchmarkSoak's scrape timeout; a short one shows the soak's loss accounting at work")
	soakHeap     = flag.String("soak.heapprofile", "", "directory BenchmarkSoak writes heap profiles to (heap-start.pb.gz after the first reading, heap-end.pb.gz at the end) for go tool pprof -diff_base")
)

const (
	soakNodes  = 16
	soakScrape = 2 * time.Second
)

// BenchmarkSoak is the collector under faults for -soak.duration (make
// soak): a generated workload replayed at -soak.speed on the in-process
// cluster (16 simulated 8-GPU nodes and their exporters, the scheduler),
// the collector's pipeline scraping them every 2 s beside hostile targets
// (garbage, a 64 MiB page, a slow-loris, a chunk-extension flood, endless
// 100 Continue heads, NUL labels, timestamps from 2001 and the year
// 287168, a redirect to a link-local address), and every 3 minutes, in
// turn (ten over a shorter soak): Postgres cut off (every connection through a proxy closed and new
// ones refused for 20 s; the shared server itself is not restarted), the
// apiserver connection cut the same way for 20 s, and a read storm of 200
// heavy API requests at once. It prints resident memory, goroutines,
// ingest lag, buffer and spool every 30 s, then samples served by the good
// exporters against those stored, drops by reason and duplicates.
func BenchmarkSoak(b *testing.B) {
	ctx := context.Background()
	c := harness.NewForTest(b, harness.Options{})
	clock, err := harness.NewClock(*soakSpeed)
	if err != nil {
		b.Fatal(err)
	}
	var specs []trace.Node
	for i := range soakNodes {
		specs = append(specs, trace.Node{Name: fmt.Sprintf("gpu-%02d", i), GPUs: 8, GPUModel: "NVIDIA-H100-80GB-HBM3",
			GPUMemoryMiB: 81559, CPUMilli: 192000, MemoryMiB: 2 << 20})
	}
	nodes, err := c.AddNodes(ctx, specs, harness.NodeOptions{Clock: clock, Workers: 8})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{}); err != nil {
		b.Fatal(err)
	}

	// Postgres and the apiserver, each behind a proxy the soak can cut.
	direct := storetest.New(b)
	dbURL, err := url.Parse(direct.Pool().Config().ConnString())
	if err != nil {
		b.Fatal(err)
	}
	dbGate := newCutter(b, dbURL.Host)
	dbURL.Host = dbGate.addr()
	s, err := store.Open(ctx, dbURL.String(), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	apiURL, err := url.Parse(c.Config.Host)
	if err != nil {
		b.Fatal(err)
	}
	kubeGate := newCutter(b, apiURL.Host)
	cfg := rest.CopyConfig(c.Config)
	cfg.Host = "https://" + kubeGate.addr()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}

	// Good exporters behind a counting proxy; hostile ones beside them.
	var served atomic.Int64
	ledger := newPageLedger()
	var urls []string
	for _, n := range specs {
		urls = append(urls, countingProxy(b, n.Name, nodes.ExporterURL(n.Name), &served, ledger))
	}
	hostile := startHostileTargets(b)
	urls = append(urls, hostile...)

	spool := b.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The scrape client as the collector's, its pages followed in the
	// ledger; the inventory hook marks the pages parsed whole and passes
	// them on to the pipeline's GPU inventory.
	scrapeClient := dcgm.NewClient()
	scrapeClient.Transport = ledger.transport(scrapeClient.Transport)
	var observe atomic.Pointer[func([]schedloop.GPU)]
	scraper := &dcgm.ExporterScraper{Targets: dcgm.StaticTargets(urls), Timeout: *soakTimeout, Client: scrapeClient,
		Inventory: func(gpus []schedloop.GPU) {
			ledger.parsedWhole(gpus)
			if f := observe.Load(); f != nil {
				(*f)(gpus)
			}
		}}
	pipe, err := collector.StartPipeline(context.Background(), collector.PipelineConfig{Store: s,
		Scraper:     scraper,
		ScrapeEvery: soakScrape, Ingest: collector.IngestOptions{SpoolDir: spool},
		Watch: &events.WatchOptions{Client: client, Dynamic: dyn}, Logger: logger})
	if err != nil {
		b.Fatal(err)
	}
	inventory := pipe.Inventory.Observe
	observe.Store(&inventory)
	// The API on its own pool (straight to Postgres), as serve wires it.
	reads, err := store.Open(ctx, direct.Pool().Config().ConnString(), store.Options{MaxConns: api.DefaultMaxConcurrent})
	if err != nil {
		b.Fatal(err)
	}
	defer reads.Close()
	apiSrv := &http.Server{Handler: api.NewRouter(reads, api.Options{}), ReadHeaderTimeout: 10 * time.Second}
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go apiSrv.Serve(apiLn)
	defer apiSrv.Close()

	// The workload: arrivals over the whole soak, on trace time.
	traceSpan := time.Duration(float64(*soakDuration) * *soakSpeed)
	jobs := trace.Generate(trace.GenConfig{Seed: 21, Jobs: max(50, int(traceSpan/(2*time.Minute))),
		MeanInterarrival: 2 * time.Minute, MinDuration: 5 * time.Minute, MaxDuration: 2 * time.Hour, IdleShare: 0.2})
	p, err := player.New(c.Client, c.Dynamic, jobs, player.Options{Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	playCtx, stopPlay := context.WithCancel(ctx)
	defer stopPlay()
	go p.Run(playCtx)

	began := time.Now()
	end := began.Add(*soakDuration)
	var peakRSS, firstRSS, lastRSS int64
	peakGoroutines, firstGoroutines, lastGoroutines := 0, 0, 0
	var peakLag, peakLagCalm time.Duration
	var heapStart map[string]int64
	storms := 0
	var stormCodes sync.Map
	b.Logf("%8s %9s %8s %8s %8s %10s %9s %10s %10s %s", "t", "rss_MiB", "anon_MiB", "file_MiB", "heap_MiB", "goroutines", "lag_s", "buffered", "spool_B", "fault")
	// A fault every 3 minutes, or ten over a shorter soak.
	sample := time.NewTicker(min(30*time.Second, max(5*time.Second, *soakDuration/20)))
	defer sample.Stop()
	fault := time.NewTicker(min(3*time.Minute, max(20*time.Second, *soakDuration/10)))
	defer fault.Stop()
	faults := 0
	lastFault := "-"
	var lastPGCut time.Time
	for time.Now().Before(end) {
		select {
		case <-sample.C:
			rss, g, lag := procmem.Resident(), runtime.NumGoroutine(), pipe.Ingester.Lag(time.Now())
			peakRSS, peakGoroutines, peakLag = max(peakRSS, rss), max(peakGoroutines, g), max(peakLag, lag)
			if firstRSS == 0 {
				firstRSS, firstGoroutines = rss, g
				heapStart = heapByOwner()
				writeHeapProfile(b, "heap-start.pb.gz")
			}
			lastRSS, lastGoroutines = rss, g
			// Lag outside a Postgres cut (and the 30 s after it, while
			// the backlog is stored) is what a read storm or a hostile
			// target could add.
			if !strings.HasPrefix(lastFault, "postgres") && time.Since(lastPGCut) > 50*time.Second {
				peakLagCalm = max(peakLagCalm, lag)
			}
			spoolBytes := dirBytes(spool)
			split := procmem.ResidentSplit()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.Logf("%8s %9d %8d %8d %8d %10d %9.2f %10d %10d %s", time.Since(began).Round(time.Second), rss>>20,
				split.Anon>>20, split.File>>20, ms.HeapInuse>>20, g, lag.Seconds(), pipe.Ingester.Buffered(), spoolBytes, lastFault)
			lastFault = "-"
		case <-fault.C:
			switch faults % 3 {
			case 0:
				lastFault = "postgres cut 20s"
				lastPGCut = time.Now()
				dbGate.cutFor(20 * time.Second)
			case 1:
				lastFault = "apiserver cut 20s"
				kubeGate.cutFor(20 * time.Second)
			case 2:
				storms++
				lastFault = "read storm " + readStorm("http://"+apiLn.Addr().String(), &stormCodes)
			}
			faults++
		}
	}
	stopPlay()
	ledger.stopping()
	pipe.StopTelemetry()
	m := pipe.Metrics
	drop := func(r string) float64 { return testutil.ToFloat64(m.Dropped.WithLabelValues(r)) }
	for settle := time.Now(); !pipe.Stored(); time.Sleep(time.Second) {
		if time.Since(settle) > 3*time.Minute {
			b.Errorf("after 3 minutes not every sample is settled: buffered %d, received %.0f, written %.0f, rejected %.0f, buffer_full %.0f, duplicates %.0f",
				pipe.Ingester.Buffered(), testutil.ToFloat64(m.Received), testutil.ToFloat64(m.Written), drop(collector.DropRejected),
				drop(collector.DropBufferFull), testutil.ToFloat64(m.Duplicates))
			break
		}
	}
	if err := pipe.Stop(); err != nil {
		b.Logf("pipeline stopped with: %v", err)
	}
	var stored, dups int64
	if err := direct.Pool().QueryRow(ctx, `SELECT count(*), count(*) - count(DISTINCT (gpu_uuid, ts)) FROM gpu_samples
		WHERE gpu_uuid LIKE 'GPU-%'`).Scan(&stored, &dups); err != nil {
		b.Fatal(err)
	}
	codes := ""
	stormCodes.Range(func(k, v any) bool { codes += fmt.Sprintf(" %v:%d", k, v.(*atomic.Int64).Load()); return true })
	b.Logf("soak %s at %vx: %d faults (%d read storms, answers%s)", soakDuration.String(), *soakSpeed, faults, storms, codes)
	b.Logf("samples: served by the good exporters %d, received %0.f, stored %d, duplicates %d; dropped: invalid %.0f, time_range %.0f, rejected %.0f, buffer_full %.0f, shutdown %.0f; samples of batches sent again and found already stored %.0f",
		served.Load(), testutil.ToFloat64(m.Received), stored, dups, drop(collector.DropInvalid), drop(collector.DropTimeRange),
		drop(collector.DropRejected), drop(collector.DropBufferFull), drop(collector.DropShutdown), testutil.ToFloat64(m.Duplicates))
	b.Logf("peak RSS %d MiB (the whole process: collector, in-process apiserver, scheduler, simulated nodes), peak goroutines %d",
		peakRSS>>20, peakGoroutines)
	for _, line := range heapTable(heapStart, heapByOwner()) {
		b.Logf("  %s", line)
	}
	writeHeapProfile(b, "heap-end.pb.gz")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	split := procmem.ResidentSplit()
	b.Logf("resident at the end %d MiB: anonymous %d (Go heap in use %d, heap free but not returned to the OS %d, stacks %d, runtime %d), mapped files %d (the binary, etcd's bbolt), shared %d",
		procmem.Resident()>>20, split.Anon>>20, ms.HeapInuse>>20, (ms.HeapIdle-ms.HeapReleased)>>20, ms.StackInuse>>20,
		(ms.MSpanInuse+ms.MCacheInuse+ms.BuckHashSys+ms.GCSys+ms.OtherSys)>>20, split.File>>20, split.Shmem>>20)
	b.Logf("growth from the first reading to the last: RSS %d -> %d MiB, goroutines %d -> %d; peak ingest lag %.1f s, %.1f s outside Postgres cuts (scrape interval %s)",
		firstRSS>>20, lastRSS>>20, firstGoroutines, lastGoroutines, peakLag.Seconds(), peakLagCalm.Seconds(), soakScrape)
	// Served but not received: each page given up on, by cause.
	lost, _, parsed := ledger.fates()
	var lostSum int64
	for _, n := range lost {
		lostSum += n
	}
	b.Logf("served but not received %d: in pages the collector gave up on %d%s", served.Load()-int64(testutil.ToFloat64(m.Received)), lostSum,
		map[bool]string{true: ", by cause:", false: ""}[lostSum > 0])
	for _, line := range ledger.report() {
		b.Logf("  %s", line)
	}
	b.Logf("pages parsed whole held %d samples (received %.0f); served - parsed whole - given up on = %d (0: every sample accounted for)",
		parsed, testutil.ToFloat64(m.Received), served.Load()-parsed-lostSum)
	scrapeErrs := ""
	for _, r := range []string{dcgm.ReasonTimeout, dcgm.ReasonFetch, dcgm.ReasonParse, dcgm.ReasonCanceled} {
		scrapeErrs += fmt.Sprintf(" %s %.0f", r, testutil.ToFloat64(scraper.Metrics.Errors().WithLabelValues(r)))
	}
	b.Logf("schedloop_collector_scrape_errors_total (every target, hostile ones included):%s", scrapeErrs)
	b.ReportMetric(float64(served.Load()-(stored-dups)), "soak_samples_lost@samples")
	b.ReportMetric(float64(lost[lostBeforeHead]+lost[lostReading]+lost[lostParsing]), "soak_samples_in_timed_out_scrapes@samples")
	b.ReportMetric(float64(served.Load()-parsed-lostSum), "soak_samples_unaccounted@samples")
	b.ReportMetric(float64(dups), "soak_duplicates@samples")
	b.ReportMetric(float64(peakRSS)/(1<<20), "soak_peak_rss_mib@MiB")
	b.ReportMetric(float64(peakGoroutines), "soak_peak_goroutines@goroutines")
	b.ReportMetric(float64(lastRSS-firstRSS)/(1<<20), "soak_rss_growth_mib@MiB")
	b.ReportMetric(float64(lastGoroutines-firstGoroutines), "soak_goroutine_growth@goroutines")
	b.ReportMetric(peakLag.Seconds(), "soak_peak_lag_s@s")
	b.ReportMetric(peakLagCalm.Seconds(), "soak_peak_lag_outside_pg_cuts_s@s")
}

// writeHeapProfile writes the heap profile to name under -soak.heapprofile,
// if set, after a collection so it shows what is live.
func writeHeapProfile(b *testing.B, name string) {
	if *soakHeap == "" {
		return
	}
	runtime.GC()
	f, err := os.Create(filepath.Join(*soakHeap, name))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// cutter is a TCP proxy that can drop every connection and refuse new ones
// for a while: the collector sees what a restart or a network cut shows it.
type cutter struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	conns   map[net.Conn]bool
	downTil time.Time
}

func newCutter(b *testing.B, target string) *cutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	c := &cutter{ln: ln, target: target, conns: map[net.Conn]bool{}}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			c.mu.Lock()
			down := time.Now().Before(c.downTil)
			c.mu.Unlock()
			if down {
				in.Close()
				continue
			}
			go c.pipe(in)
		}
	}()
	return c
}

func (c *cutter) addr() string { return c.ln.Addr().String() }

func (c *cutter) pipe(in net.Conn) {
	out, err := net.Dial("tcp", c.target)
	if err != nil {
		in.Close()
		return
	}
	c.mu.Lock()
	c.conns[in], c.conns[out] = true, true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.conns, in)
		delete(c.conns, out)
		c.mu.Unlock()
		in.Close()
		out.Close()
	}()
	go func() { io.Copy(out, in); out.Close() }()
	io.Copy(in, out)
}

// cutFor closes every connection and refuses new ones for d.
func (c *cutter) cutFor(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.downTil = time.Now().Add(d)
	for conn := range c.conns {
		conn.Close()
	}
}

// countingProxy serves target's page and counts the GPU samples in it (one
// DCGM_FI_DEV_GPU_UTIL series per GPU), each page entered in ledger.
func countingProxy(b *testing.B, node, target string, served *atomic.Int64, ledger *pageLedger) string {
	u, err := url.Parse(target)
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.ModifyResponse = func(r *http.Response) error {
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return err
		}
		n := int64(strings.Count(string(body), "\nDCGM_FI_DEV_GPU_UTIL{"))
		served.Add(n)
		r.Header.Set(pageHeader, ledger.served(node, n))
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + u.Path
}

// startHostileTargets serves one target per kind of hostile exporter and
// returns their URLs.
func startHostileTargets(b *testing.B) []string {
	nul := "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-evil\",Hostname=\"evil\",pod=\"a\x00b\"} 50\n"
	var far strings.Builder
	for d := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() < 2026; d = d.AddDate(0, 0, 1) {
		fmt.Fprintf(&far, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-far\",Hostname=\"far\"} 50 %d\n", d.UnixMilli())
	}
	fmt.Fprintf(&far, "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-far\",Hostname=\"far\"} 50 %d\n", int64(9e15))
	huge := strings.Repeat("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-huge\",Hostname=\"huge\"} 50\n", (64<<20)/64)
	raw := map[string]func(c net.Conn){
		"garbage": func(c net.Conn) {
			readHead(c)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4096\r\n\r\n")
			c.Write(make([]byte, 4096))
		},
		"slow-loris": func(c net.Conn) {
			readHead(c)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
			for i := 0; i < 600; i++ {
				if _, err := c.Write([]byte("D")); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		},
		"chunk-extensions": func(c net.Conn) {
			readHead(c)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
			ext := ";" + strings.Repeat("x", 60000)
			for i := 0; i < 20000; i++ {
				if _, err := io.WriteString(c, "1"+ext+"\r\nD\r\n"); err != nil {
					return
				}
			}
		},
		"endless-1xx": func(c net.Conn) {
			readHead(c)
			for i := 0; i < 1_000_000; i++ {
				if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
					return
				}
			}
		},
	}
	pages := map[string]http.HandlerFunc{
		"nul-label": func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, nul) },
		"far-time":  func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, far.String()) },
		"huge":      func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, huge) },
		"redirect": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://169.254.169.254/metrics", http.StatusFound)
		},
	}
	var urls []string
	for _, serve := range raw {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); serve(c) }()
			}
		}()
		urls = append(urls, "http://"+ln.Addr().String()+"/metrics")
	}
	for _, h := range pages {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		b.Cleanup(func() { srv.Close() })
		urls = append(urls, "http://"+ln.Addr().String()+"/metrics")
	}
	return urls
}

// readHead reads a request's head, so the answer comes after the question.
func readHead(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil || line == "\r\n" {
			return
		}
	}
}

// readStorm sends 200 heavy reads at once and counts the answers by code.
func readStorm(base string, codes *sync.Map) string {
	var wg sync.WaitGroup
	var n5xx atomic.Int64
	for i := range 200 {
		wg.Go(func() {
			path := []string{"/api/v1/idle/heatmap?from=-30d&limit=500", "/api/v1/idle/heatmap?from=-7d&step=1h&limit=500",
				"/api/v1/idle/holders?from=-30d&limit=500"}[i%3]
			resp, err := http.Get(base + path)
			code := "error"
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = strconv.Itoa(resp.StatusCode)
				if resp.StatusCode >= 500 {
					n5xx.Add(1)
				}
			}
			v, _ := codes.LoadOrStore(code, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		})
	}
	wg.Wait()
	return fmt.Sprintf("(%d answers 5xx)", n5xx.Load())
}

func dirBytes(dir string) int64 {
	entries, _ := os.ReadDir(dir)
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			n += info.Size()
		}
	}
	return n
}
