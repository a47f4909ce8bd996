package api_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/procmem"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

const (
	stormNodes   = 500
	stormClients = 200
	stormEvery   = 5 * time.Second // the ingest feeder's scrape interval
)

// stormPaths are heavy reads over every node: the 30-day heatmaps of the
// finding that starved ingest, a week's hourly heatmap (84,000 cells),
// the idle holders and the per-node groups of 30 days.
var stormPaths = []string{
	"/api/v1/idle/heatmap?from=-30d&limit=500",
	"/api/v1/idle/heatmap?from=-7d&step=1h&limit=500",
	"/api/v1/idle/holders?from=-30d&limit=500",
	"/api/v1/idle/groups?from=-30d&group_by=node&limit=500",
}

// BenchmarkAPIStorm is finding-sized load on the collector as serve wires
// it: 30 days x 500 nodes of rolled-up history, the API on its own pool
// behind a real HTTP server with serve's timeouts, and an ingester on the
// ingest pool taking a scrape round of 4,000 samples (500 nodes x 8 GPUs)
// every stormEvery, while 200 clients each make a heavy read at once
// (retrying after Retry-After when told to come back).
//
// Headline metrics: api_storm_5xx (answers 500-599; want 0),
// api_storm_ingest_lag_s (the oldest unstored sample's age at its worst;
// want at most the scrape interval), collector_storm_peak_rss_mib (the
// process's resident memory at its worst, sampled every 50 ms; the
// manifest's limit is 1,024 MiB), with api_storm_429 and the storm's wall
// time beside them.
func BenchmarkAPIStorm(b *testing.B) {
	ingestStore := storetest.New(b)
	conn, err := ingestStore.Pool().Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	from := benchEnd.Add(-benchDays * 24 * time.Hour)
	named := map[string]any{"start": from, "hours": benchDays * 24, "nodes": stormNodes, "pods": 1000, "whypods": []string{}}
	began := time.Now()
	for _, q := range benchHistorySQL {
		sql, args := positional(q, named)
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			conn.Release()
			b.Fatalf("generate history: %v\n%s", err, q)
		}
	}
	conn.Release()
	b.Logf("generated 30 days x %d nodes of history in %s", stormNodes, time.Since(began).Round(time.Millisecond))

	reads, err := store.Open(ctx, ingestStore.Pool().Config().ConnString(), store.Options{MaxConns: api.DefaultMaxConcurrent})
	if err != nil {
		b.Fatal(err)
	}
	defer reads.Close()
	opts := api.Options{Now: func() time.Time { return benchEnd }, Timeout: 15 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: api.NewRouter(reads, opts), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: api.DefaultQueueWait + opts.Timeout + 30*time.Second, IdleTimeout: 2 * time.Minute}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	for n := 0; n < b.N; n++ {
		runStorm(b, ingestStore, base)
	}
}

func runStorm(b *testing.B, ingestStore *store.Store, base string) {
	in, err := collector.NewIngester(ingestStore, collector.IngestOptions{Permanent: store.Permanent})
	if err != nil {
		b.Fatal(err)
	}
	ictx, stopIngest := context.WithCancel(context.Background())
	ingestDone := make(chan struct{})
	go func() { in.Run(ictx); close(ingestDone) }()
	stormDone := make(chan struct{})
	var lagMax time.Duration
	var rssMax int64
	var watchers sync.WaitGroup
	watchers.Go(func() { // feeder: a scrape round every stormEvery
		t := time.NewTicker(stormEvery)
		defer t.Stop()
		for {
			in.Add(stormRound(time.Now()))
			in.Flush()
			select {
			case <-stormDone:
				return
			case <-t.C:
			}
		}
	})
	watchers.Go(func() { // lag and memory, sampled
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			lagMax = max(lagMax, in.Lag(time.Now()))
			rssMax = max(rssMax, procmem.Resident())
			select {
			case <-stormDone:
				return
			case <-t.C:
			}
		}
	})

	var code5xx, code429, code4xx, ok atomic.Int64
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: stormClients}}
	started := time.Now()
	var clients sync.WaitGroup
	for i := range stormClients {
		clients.Go(func() {
			path := stormPaths[i%len(stormPaths)]
			for {
				code, retry, err := stormGet(client, base+path)
				if err != nil {
					b.Errorf("GET %s: %v", path, err)
					code5xx.Add(1)
					return
				}
				switch {
				case code == http.StatusTooManyRequests:
					code429.Add(1)
					time.Sleep(retry)
					continue
				case code >= 500:
					code5xx.Add(1)
				case code >= 400:
					code4xx.Add(1)
				default:
					ok.Add(1)
				}
				return
			}
		})
	}
	clients.Wait()
	wall := time.Since(started)
	// Let the feeder's next round land after the storm, then stop.
	close(stormDone)
	watchers.Wait()
	stopIngest()
	<-ingestDone
	b.Logf("storm: %d clients, %d answered 200, %d 4xx, %d 5xx, %d times told 429; %s wall; ingest lag at worst %s; peak RSS %d MiB",
		stormClients, ok.Load(), code4xx.Load(), code5xx.Load(), code429.Load(), wall.Round(time.Millisecond),
		lagMax.Round(time.Millisecond), rssMax>>20)
	if code4xx.Load() > 0 {
		b.Errorf("%d requests were refused as bad; the storm's paths must all be answerable", code4xx.Load())
	}
	b.ReportMetric(float64(code5xx.Load()), "api_storm_5xx@requests")
	b.ReportMetric(float64(code429.Load()), "api_storm_429@requests")
	b.ReportMetric(lagMax.Seconds(), "api_storm_ingest_lag_s@s")
	b.ReportMetric(float64(rssMax)/(1<<20), "collector_storm_peak_rss_mib@MiB")
	b.ReportMetric(wall.Seconds(), "api_storm_wall_s@s")
}

// stormGet GETs url, reading the whole answer, and returns its code and
// Retry-After.
func stormGet(c *http.Client, url string) (int, time.Duration, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return resp.StatusCode, 0, err
	}
	retry := time.Second
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		retry = time.Duration(s) * time.Second
	}
	return resp.StatusCode, retry, nil
}

// stormRound is one scrape of every GPU of the storm's nodes at t.
func stormRound(t time.Time) []schedloop.GPUSample {
	out := make([]schedloop.GPUSample, 0, stormNodes*8)
	for n := range stormNodes {
		for g := range 8 {
			out = append(out, schedloop.GPUSample{Time: t, GPUUUID: fmt.Sprintf("GPU-%04d-%d", n, g),
				Node: fmt.Sprintf("node-%04d", n), GPUIndex: g, GPUUtil: 80, GrEngineActive: 0.8, PowerWatts: 300})
		}
	}
	return out
}
