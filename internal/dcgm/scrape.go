package dcgm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
// collection interval.
const (
	DefaultScrapeTimeout     = 10 * time.Second
	DefaultScrapeConcurrency = 16
)

// acceptHeader prefers the text format and accepts OpenMetrics, which parses
// at the same speed, from exporters or proxies that only speak it.
const acceptHeader = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"

// ExporterScraper scrapes dcgm-exporter endpoints. Run scrapes each target on
// its own clock; Collect (the Source interface) scrapes every target once.
// Zero fields take the defaults above; Targets is required. Run and Collect
// must not be used at once.
type ExporterScraper struct {
	Targets TargetLister
	// Client defaults to NewClient(): keep-alive per target, no global
	// idle cap, redirects within the target's host only.
	Client *http.Client
	// Timeout bounds a scrape as a whole: connect, read and parse.
	Timeout time.Duration
	// Concurrency is the number of targets Collect scrapes at once.
	Concurrency int
	// Limits apply to every target; TargetLimits overrides them for the
	// targets it names (by URL), field by field.
	Limits       Limits
	TargetLimits map[string]Limits
	// TimestampWindow bounds exporter timestamps around the scrape time;
	// DefaultTimestampWindow if zero.
	TimestampWindow time.Duration
	// Now stamps the samples; it defaults to time.Now.
	Now func() time.Time
	// Metrics, if set, counts scrapes and errors.
	Metrics *ScrapeMetrics
	// Inventory, if set, is told the GPUs (UUID, node, index, model) each
	// page named; it is called from the scraping goroutines and must not block.
	Inventory func(gpus []schedloop.GPU)
	// Logger receives a line when a target starts or stops failing.
	Logger *slog.Logger

	mu      sync.Mutex
	parsers map[string]*pageParser // Collect's, per target
	buffers [][]byte               // page buffers between scrapes
}

// NewClient is the scrape client: HTTP/1.1 keep-alive with one idle
// connection per exporter however many exporters there are (DefaultTransport
// keeps 100 in all, so most scrapes of a larger cluster would open a new
// one), gzip asked for and decoded by the transport (so body limits count
// decoded bytes), response headers capped, no proxy from the environment (a
// cluster's egress proxy must not sit between the collector and its nodes),
// and redirects followed only within the target's own host. Deadlines come
// from each request's context.
func NewClient() *http.Client {
	dialer := &net.Dialer{KeepAlive: 30 * time.Second}
	return &http.Client{
		Transport: &http.Transport{
			DialContext:            dialer.DialContext,
			MaxIdleConns:           0,
			MaxIdleConnsPerHost:    2,
			IdleConnTimeout:        5 * time.Minute,
			TLSHandshakeTimeout:    10 * time.Second,
			MaxResponseHeaderBytes: 64 << 10,
		},
		CheckRedirect: sameHostRedirect,
	}
}

// maxRedirects is how many same-host redirects a scrape follows.
const maxRedirects = 3

func sameHostRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if first := via[0].URL; req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
		return fmt.Errorf("redirect to %s://%s refused: a target may redirect within %s://%s only", req.URL.Scheme, req.URL.Host, first.Scheme, first.Host)
	}
	return nil
}

var defaultClient = NewClient()

// maxPooledBody keeps an unusually large page's buffer from being kept for
// the next scrapes; maxPooledBuffers bounds how many are kept.
const (
	maxPooledBody    = 4 << 20
	maxPooledBuffers = 64
)

// TargetError is one target's failed scrape.
type TargetError struct {
	Target string
	Err    error
}

func (e *TargetError) Error() string {
	return fmt.Sprintf("scrape dcgm-exporter %s: %v", e.Target, e.Err)
}
func (e *TargetError) Unwrap() error { return e.Err }

// targets lists the targets, sorted and once each.
func (s *ExporterScraper) targets(ctx context.Context) ([]string, error) {
	if s.Targets == nil {
		return nil, errors.New("dcgm-exporter scraper: no target lister configured")
	}
	targets, err := s.Targets.ListTargets(ctx)
	slices.Sort(targets)
	targets = slices.Compact(targets)
	if err != nil {
		err = fmt.Errorf("list dcgm-exporter targets: %w", err)
	}
	return targets, err
}

// Collect scrapes every target once, Concurrency at a time, and returns the
// samples of those that answered. Failed targets are counted and returned as
// *TargetError values joined into one error; they do not stop the others.
func (s *ExporterScraper) Collect(ctx context.Context) ([]schedloop.GPUSample, error) {
	targets, err := s.targets(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.parsers == nil {
		s.parsers = map[string]*pageParser{}
	}
	parsers := make([]*pageParser, len(targets))
	for i, t := range targets {
		if s.parsers[t] == nil {
			s.parsers[t] = s.newParser()
		}
		parsers[i] = s.parsers[t]
	}
	s.mu.Unlock()

	type result struct {
		samples []schedloop.GPUSample
		err     error
	}
	results := make([]result, len(targets))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(cmpOr(s.Concurrency, DefaultScrapeConcurrency), len(targets)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(targets) {
					return
				}
				samples, err := s.scrape(ctx, targets[i], parsers[i], s.Timeout)
				results[i] = result{samples, err}
			}
		})
	}
	wg.Wait()

	var all []schedloop.GPUSample
	var errs []error
	for _, r := range results {
		all = append(all, r.samples...)
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	return all, errors.Join(errs...)
}

func (s *ExporterScraper) newParser() *pageParser {
	pp := newPageParser()
	pp.Window = s.TimestampWindow
	return pp
}

// Run scrapes every target every interval until ctx ends, each on its own
// clock: a target's scrapes fall at a fixed offset within each interval of
// the wall clock, derived from its URL (as Prometheus spreads them), and a slow, huge or failing
// target costs only its own scrapes. The target list is read again every
// interval; targets that went are stopped, new ones started. Each page's
// samples go to add as soon as it is parsed. When ctx ends, scrapes and
// parses in flight are abandoned (nothing of their pages reaches add) and
// Run returns once every target's loop has.
func (s *ExporterScraper) Run(ctx context.Context, every time.Duration, add func([]schedloop.GPUSample)) error {
	if every <= 0 {
		return fmt.Errorf("dcgm-exporter scraper: interval %v is not positive", every)
	}
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	loops := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	defer func() {
		for _, stop := range loops {
			stop()
		}
		wg.Wait()
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		targets, err := s.targets(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("dcgm-exporter targets not listed; scraping the last known ones", "err", err)
		}
		if err == nil {
			for target, stop := range loops {
				if _, found := slices.BinarySearch(targets, target); !found {
					stop()
					delete(loops, target)
				}
			}
		}
		for _, target := range targets {
			if loops[target] != nil {
				continue
			}
			loopCtx, stop := context.WithCancel(ctx)
			loops[target] = stop
			wg.Go(func() { s.loop(loopCtx, target, every, add, log) })
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// loop scrapes one target every interval until ctx ends.
func (s *ExporterScraper) loop(ctx context.Context, target string, every time.Duration, add func([]schedloop.GPUSample), log *slog.Logger) {
	pp := s.newParser()
	timer := time.NewTimer(untilPhase(time.Now(), offset(target, every), every))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return
	case <-timer.C:
	}
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		// A scrape never outlasts the interval, so it is never skipped
		// because the last one still runs.
		samples, err := s.scrape(ctx, target, pp, min(cmpOr(s.Timeout, DefaultScrapeTimeout), every))
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !failing:
			log.Warn("dcgm-exporter target failing", "target", target, "reason", reasonOf(err), "err", err)
		case err == nil && failing:
			log.Info("dcgm-exporter target answering again", "target", target)
		}
		failing = err != nil
		if len(samples) > 0 {
			add(samples)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// untilPhase is the wait from now to the next instant whose offset within
// the interval, counted from the Unix epoch, is phase.
func untilPhase(now time.Time, phase, every time.Duration) time.Duration {
	return (phase - time.Duration(now.UnixNano()%int64(every)) + every) % every
}

// offset is where in the interval target's scrapes fall, on the wall clock:
// fixed per target, so its samples stay an interval apart across restarts of
// its loop and across collectors taking over from one another, and spread,
// so the targets' scrapes do not all start at once.
func offset(target string, every time.Duration) time.Duration {
	h := fnv.New64a()
	_, _ = h.Write([]byte(target))
	return time.Duration(h.Sum64() % uint64(every))
}

func (s *ExporterScraper) limits(target string) Limits {
	l := s.Limits
	if o, ok := s.TargetLimits[target]; ok {
		l.SampleLimit = cmpOr(o.SampleLimit, l.SampleLimit)
		l.MaxBodyBytes = cmpOr(o.MaxBodyBytes, l.MaxBodyBytes)
	}
	return l.withDefaults()
}

// scrape fetches and parses one target within timeout (the default when
// zero); the samples are returned only when the whole page was good.
func (s *ExporterScraper) scrape(ctx context.Context, target string, pp *pageParser, timeout time.Duration) ([]schedloop.GPUSample, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cmpOr(timeout, DefaultScrapeTimeout))
	defer cancel()
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	lim := s.limits(target)
	page := s.takeBuffer()
	samples, err := func() ([]schedloop.GPUSample, error) {
		body, contentType, err := s.fetch(ctx, target, lim.MaxBodyBytes, &page)
		if err != nil {
			return nil, err
		}
		set, err := pp.parse(ctx, body, contentType, now(), lim)
		if err != nil {
			return nil, err
		}
		if s.Inventory != nil {
			s.Inventory(set.inventory())
		}
		return set.sorted(), nil
	}()
	s.keepBuffer(page)
	if err != nil {
		// A deadline that passed mid-read or mid-parse reads as a
		// timeout whatever the error says.
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		err = &TargetError{Target: target, Err: err}
	}
	s.Metrics.observe(err, len(samples), time.Since(start))
	return samples, err
}

// fetch returns target's page, read into *buf (which it may grow), and its
// Content-Type.
func (s *ExporterScraper) fetch(ctx context.Context, target string, limit int64, buf *[]byte) ([]byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, "", scrapeErr(ReasonFetch, "build request: %w", err)
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
		return nil, "", scrapeErr(ReasonStatus, "HTTP status %s", resp.Status)
	}
	if resp.ContentLength > limit {
		return nil, "", scrapeErr(ReasonBodyLimit, "body of %d bytes exceeds %d bytes (body limit)", resp.ContentLength, limit)
	}
	page := bytes.NewBuffer((*buf)[:0])
	if n := resp.ContentLength; n > 0 {
		page.Grow(int(n) + 1) // +1: ReadFrom wants room to see EOF
	}
	_, err = page.ReadFrom(io.LimitReader(resp.Body, limit+1))
	*buf = page.Bytes()[:0]
	if err != nil {
		return nil, "", fmt.Errorf("read body: %w", err)
	}
	if int64(page.Len()) > limit {
		return nil, "", scrapeErr(ReasonBodyLimit, "body exceeds %d bytes after decoding (body limit)", limit)
	}
	return page.Bytes(), resp.Header.Get("Content-Type"), nil
}

func (s *ExporterScraper) takeBuffer() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.buffers); n > 0 {
		b := s.buffers[n-1]
		s.buffers = s.buffers[:n-1]
		return b
	}
	return nil
}

func (s *ExporterScraper) keepBuffer(b []byte) {
	if b == nil || cap(b) > maxPooledBody {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.buffers) < maxPooledBuffers {
		s.buffers = append(s.buffers, b[:0])
	}
}

func cmpOr[T int | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

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
	const ns, sub = "schedloop", "collector"
	m := &ScrapeMetrics{
		scrapes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "scrapes_total",
			Help: "Scrapes of dcgm-exporter targets, successful or not.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "scrape_errors_total",
			Help: "Failed scrapes of dcgm-exporter targets by reason: fetch (connect, protocol), timeout, status (non-200), body_limit, sample_limit, parse (malformed exposition), invalid (a value its column cannot hold), canceled (shutdown). Nothing of a failed page is stored.",
		}, []string{"reason"}),
		samples: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "scrape_samples_total",
			Help: "GPU samples read from dcgm-exporter targets.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "scrape_duration_seconds",
			Help:    "Duration of one dcgm-exporter scrape: connect, read and parse.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
	}
	for _, r := range reasons {
		m.errors.WithLabelValues(r)
	}
	return m
}

// Errors is the failed-scrape counter, by reason.
func (m *ScrapeMetrics) Errors() *prometheus.CounterVec { return m.errors }

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

func (m *ScrapeMetrics) observe(err error, samples int, d time.Duration) {
	if m == nil {
		return
	}
	m.scrapes.Inc()
	m.duration.Observe(d.Seconds())
	if err != nil {
		m.errors.WithLabelValues(reasonOf(err)).Inc()
		return
	}
	m.samples.Add(float64(samples))
}
