package dcgm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/schedloop/schedloop"
)

// TargetLister says which dcgm-exporter /metrics URLs to scrape right now.
type TargetLister interface {
	ListTargets(ctx context.Context) ([]string, error)
}

// StaticTargets is a fixed list of /metrics URLs.
type StaticTargets []string

// ListTargets returns a copy of the list.
func (s StaticTargets) ListTargets(context.Context) ([]string, error) {
	return slices.Clone(s), nil
}

// Defaults of ExporterScraper. The timeout stays under a typical 15 s
// collection interval; the body limit is ~20x a 1,000-GPU page.
const (
	DefaultScrapeTimeout     = 10 * time.Second
	DefaultScrapeConcurrency = 16
	DefaultMaxBodyBytes      = 32 << 20
)

// acceptHeader prefers the text format, which expfmt parses several times
// faster than OpenMetrics, and still accepts OpenMetrics from proxies.
const acceptHeader = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"

// ExporterScraper is a Source that scrapes dcgm-exporter endpoints. Zero
// fields take the defaults above; Targets is required.
type ExporterScraper struct {
	Targets TargetLister
	// Client defaults to a client without a global timeout: each request
	// carries its own, derived from Timeout and the caller's context.
	Client       *http.Client
	Timeout      time.Duration
	Concurrency  int
	MaxBodyBytes int64
	// Now stamps the samples; it defaults to time.Now.
	Now func() time.Time
	// Metrics, if set, counts scrapes and errors.
	Metrics *ScrapeMetrics
	// Inventory, if set, is told the GPUs (UUID, node, index, model) each
	// page named; it is called from the scraping goroutines and must not block.
	Inventory func(gpus []schedloop.GPU)

	buffersMu sync.Mutex
	buffers   []*[]byte // page buffers of the workers, between rounds
}

// defaultClient serves scrapers without a Client of their own. It has a
// transport of its own too, so these settings leave http.DefaultTransport
// alone.
var defaultClient = &http.Client{Transport: scrapeTransport()}

func scrapeTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// An 8-GPU node's page is ~45 KB with dcgm-exporter's default counters.
	// With the default 4 KB buffer a scrape took ~6 reads, with 64 KB ~4
	// (16 KB gained nothing, 32 KB half). The buffer lives as long as the
	// connection: 64 KB per exporter.
	t.ReadBufferSize = 64 << 10
	// Keep one idle connection per exporter between scrapes however many
	// exporters there are: DefaultTransport keeps 100 in all, so in a larger
	// cluster most scrapes would open a new connection.
	t.MaxIdleConns = 0
	return t
}

// maxPooledBody keeps an unusually large page's buffer from being kept for
// the next scrapes.
const maxPooledBody = 4 << 20

// TargetError is one target's failed scrape.
type TargetError struct {
	Target string
	Err    error
}

func (e *TargetError) Error() string {
	return fmt.Sprintf("scrape dcgm-exporter %s: %v", e.Target, e.Err)
}
func (e *TargetError) Unwrap() error { return e.Err }

// Collect scrapes every target concurrently and returns the samples of those
// that answered. Failed targets are counted and returned as *TargetError
// values joined into one error; they do not stop the others.
func (s *ExporterScraper) Collect(ctx context.Context) ([]schedloop.GPUSample, error) {
	if s.Targets == nil {
		return nil, errors.New("dcgm-exporter scraper: no target lister configured")
	}
	targets, err := s.Targets.ListTargets(ctx)
	if err != nil {
		return nil, fmt.Errorf("list dcgm-exporter targets: %w", err)
	}
	slices.Sort(targets)
	targets = slices.Compact(targets)

	type result struct {
		samples []schedloop.GPUSample
		err     error
	}
	results := make([]result, len(targets))
	// A fixed set of workers rather than a goroutine per target: a scrape
	// grows its goroutine's stack to tens of KB, and a fresh goroutine per
	// target paid for that growth on every scrape.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(cmpOr(s.Concurrency, DefaultScrapeConcurrency), len(targets)) {
		wg.Go(func() {
			// The worker's page buffer, reused target after target and
			// round after round: a sync.Pool loses its buffers at every
			// garbage collection, and a page of tens of KB was allocated
			// and zeroed again.
			page := s.takePageBuffer()
			defer s.keepPageBuffer(page)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(targets) {
					return
				}
				if err := ctx.Err(); err != nil {
					results[i].err = &TargetError{Target: targets[i], Err: err}
					continue
				}
				samples, err := s.scrape(ctx, targets[i], page)
				if err != nil {
					err = &TargetError{Target: targets[i], Err: err}
				}
				results[i] = result{samples, err}
			}
		})
	}
	wg.Wait()

	n := 0
	for _, r := range results {
		n += len(r.samples)
	}
	all := make([]schedloop.GPUSample, 0, n)
	var errs []error
	for _, r := range results {
		all = append(all, r.samples...)
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	return all, errors.Join(errs...)
}

func (s *ExporterScraper) takePageBuffer() *[]byte {
	s.buffersMu.Lock()
	defer s.buffersMu.Unlock()
	if n := len(s.buffers); n > 0 {
		b := s.buffers[n-1]
		s.buffers = s.buffers[:n-1]
		return b
	}
	return new([]byte)
}

func (s *ExporterScraper) keepPageBuffer(b *[]byte) {
	s.buffersMu.Lock()
	defer s.buffersMu.Unlock()
	if cap(*b) <= maxPooledBody && len(s.buffers) < cmpOr(s.Concurrency, DefaultScrapeConcurrency) {
		s.buffers = append(s.buffers, b)
	}
}

// scrape fetches and parses one target; page is a buffer it may use and
// grow, the caller's to reuse once scrape returns.
func (s *ExporterScraper) scrape(ctx context.Context, target string, page *[]byte) ([]schedloop.GPUSample, error) {
	start := time.Now()
	// The timeout is a deadline passed down rather than a context of its
	// own: a timer and a child context per scrape were a tenth of the CPU
	// of scraping, and the page client needs only the deadline, which the
	// connection enforces.
	deadline := start.Add(cmpOr(s.Timeout, DefaultScrapeTimeout))
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}

	stage := stageFetch
	samples, err := func() ([]schedloop.GPUSample, error) {
		limit := cmpOr(s.MaxBodyBytes, DefaultMaxBodyBytes)
		body, format, err := s.fetch(ctx, deadline, target, limit, page, &stage)
		if err != nil {
			return nil, err
		}
		stage = stageParse
		set, err := parsePage(body, format, now())
		if err != nil {
			return nil, err
		}
		if s.Inventory != nil {
			s.Inventory(set.inventory())
		}
		return set.sorted(), nil
	}()
	s.Metrics.observe(stage, err, len(samples), time.Since(start))
	return samples, err
}

// fetch returns target's page, read into *buf (which it may grow and leaves
// for the caller to reuse once the page is parsed), and the page's format,
// by deadline. A failure sets *stage to stageStatus when the exporter
// answered but not with a page.
func (s *ExporterScraper) fetch(ctx context.Context, deadline time.Time, target string, limit int64, buf *[]byte, stage *string) ([]byte, expfmt.Format, error) {
	if s.Client == nil {
		t, err := defaultPageClient.target(target)
		if err != nil {
			return nil, "", fmt.Errorf("build request: %w", err)
		}
		if t.direct {
			resp, body, err := defaultPageClient.get(ctx, deadline, t, buf, limit)
			switch {
			case errors.Is(err, errUseNetHTTP):
			case errors.As(err, new(errBodyTooLarge)):
				*stage = stageStatus
				return nil, "", err
			case err != nil:
				return nil, "", err
			case resp.status != http.StatusOK:
				*stage = stageStatus
				return nil, "", fmt.Errorf("HTTP status %s", resp.statusLine)
			default:
				return body, resp.format, nil
			}
		}
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return s.fetchNetHTTP(ctx, target, limit, buf, stage)
}

func (s *ExporterScraper) fetchNetHTTP(ctx context.Context, target string, limit int64, buf *[]byte, stage *string) ([]byte, expfmt.Format, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, "", fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Accept", acceptHeader)
	client := s.Client
	if client == nil {
		client = defaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		*stage = stageStatus
		return nil, "", fmt.Errorf("HTTP status %s", resp.Status)
	}
	page := bytes.NewBuffer((*buf)[:0])
	if n := resp.ContentLength; n > 0 && n <= limit {
		page.Grow(int(n) + 1) // +1: ReadFrom wants room to see EOF
	}
	_, err = page.ReadFrom(io.LimitReader(resp.Body, limit+1))
	*buf = page.Bytes()[:0]
	if err != nil {
		return nil, "", fmt.Errorf("read body: %w", err)
	}
	if int64(page.Len()) > limit {
		*stage = stageStatus
		return nil, "", errBodyTooLarge{limit}
	}
	return page.Bytes(), expfmt.ResponseFormat(resp.Header), nil
}

func cmpOr[T int | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// Stages of a scrape, the label of the error counter.
const (
	stageFetch  = "fetch"
	stageStatus = "status"
	stageParse  = "parse"
)

// ScrapeMetrics counts dcgm-exporter scrapes for the collector's /metrics.
// Register it with a prometheus.Registerer; a nil *ScrapeMetrics counts
// nothing.
type ScrapeMetrics struct {
	scrapes  prometheus.Counter
	errors   *prometheus.CounterVec
	samples  prometheus.Counter
	duration prometheus.Histogram
}

var _ prometheus.Collector = (*ScrapeMetrics)(nil)

// NewScrapeMetrics returns unregistered scrape counters.
func NewScrapeMetrics() *ScrapeMetrics {
	const ns, sub = "schedloop", "dcgm_exporter"
	m := &ScrapeMetrics{
		scrapes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "scrapes_total",
			Help: "Scrapes of dcgm-exporter targets, successful or not.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "scrape_errors_total",
			Help: "Failed scrapes of dcgm-exporter targets by stage: fetch (connect, timeout), status (non-200, oversized body), parse (malformed exposition).",
		}, []string{"stage"}),
		samples: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "samples_total",
			Help: "GPU samples read from dcgm-exporter targets.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "scrape_duration_seconds",
			Help:    "Duration of one dcgm-exporter scrape, fetch and parse.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
	}
	for _, st := range []string{stageFetch, stageStatus, stageParse} {
		m.errors.WithLabelValues(st)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *ScrapeMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.scrapes.Describe(ch)
	m.errors.Describe(ch)
	m.samples.Describe(ch)
	m.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *ScrapeMetrics) Collect(ch chan<- prometheus.Metric) {
	m.scrapes.Collect(ch)
	m.errors.Collect(ch)
	m.samples.Collect(ch)
	m.duration.Collect(ch)
}

func (m *ScrapeMetrics) observe(stage string, err error, samples int, d time.Duration) {
	if m == nil {
		return
	}
	m.scrapes.Inc()
	m.duration.Observe(d.Seconds())
	if err != nil {
		m.errors.WithLabelValues(stage).Inc()
		return
	}
	m.samples.Add(float64(samples))
}
