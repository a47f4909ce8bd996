package dcgm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"

	"github.com/schedloop/schedloop"
)

// Pages are parsed with Prometheus's own scrape parsers (model/textparse):
// the text format and OpenMetrics 1.0 stream through the same loop, so a
// page costs the same in either format. What the collector adds is a cache
// per target of the series it has already resolved, keyed by the series'
// bytes on the page: dcgm-exporter prints the same label sets scrape after
// scrape, so labels are read and checked once per series, not once per
// scrape, and series of families the collector does not store are skipped
// by name without their labels being built.

// Content types of the two formats the collector asks for.
const (
	contentTypeText        = "text/plain"
	contentTypeOpenMetrics = "application/openmetrics-text"
)

// Limits of one target's pages. Zero fields take the defaults.
type Limits struct {
	// SampleLimit is the most series a page may hold, counting every
	// family's (parsing them is the cost, stored or not), as Prometheus's
	// sample_limit does.
	SampleLimit int
	// MaxBodyBytes is the largest page accepted, counted after
	// decompression.
	MaxBodyBytes int64
}

// Defaults of Limits. dcgm-exporter with its default counters prints about
// 25 series per GPU, so 8-GPU node pages hold ~200 series and ~45 KB; the
// defaults leave room for a 1,000-GPU page behind a proxy (~125,000 series,
// ~6 MB) and still stop a page that would take seconds of CPU.
const (
	DefaultSampleLimit  = 200_000
	DefaultMaxBodyBytes = 32 << 20
)

func (l Limits) withDefaults() Limits {
	if l.SampleLimit <= 0 {
		l.SampleLimit = DefaultSampleLimit
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return l
}

// DefaultTimestampWindow is how far an exporter's own sample timestamp may
// lie from the scrape time. dcgm-exporter sends none; a page that does, with
// a clock far off, would put rows into days nobody reads.
const DefaultTimestampWindow = 10 * time.Minute

// Reasons a scrape fails, the label of the scrape error counter.
const (
	ReasonFetch       = "fetch"        // connect, TLS, protocol or read error
	ReasonTimeout     = "timeout"      // the scrape's deadline passed
	ReasonStatus      = "status"       // an answer other than 200
	ReasonBodyLimit   = "body_limit"   // page over MaxBodyBytes
	ReasonSampleLimit = "sample_limit" // page over SampleLimit
	ReasonParse       = "parse"        // not a valid exposition
	ReasonInvalid     = "invalid"      // a stored value out of its column's range
	ReasonCanceled    = "canceled"     // the collector is shutting down
)

// reasons lists them for the counter's zero values.
var reasons = []string{ReasonFetch, ReasonTimeout, ReasonStatus, ReasonBodyLimit, ReasonSampleLimit, ReasonParse, ReasonInvalid, ReasonCanceled}

// ScrapeError is a failed scrape with the reason it is counted under.
type ScrapeError struct {
	Reason string
	Err    error
}

func (e *ScrapeError) Error() string { return e.Err.Error() }
func (e *ScrapeError) Unwrap() error { return e.Err }

func scrapeErr(reason string, format string, args ...any) error {
	return &ScrapeError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// reasonOf is the counter label of err.
func reasonOf(err error) string {
	var se *ScrapeError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, context.Canceled):
		return ReasonCanceled
	case errors.As(err, &se):
		return se.Reason
	}
	return ReasonFetch
}

// cachedSeries is what one series of a page resolved to.
type cachedSeries struct {
	metric int // index in Metrics
	labels seriesLabels
	// err is the series' own error (no UUID, a bad index), given again
	// each time the series appears.
	err error
	// seen is the parse that last met the series; older ones are dropped.
	seen uint64
}

// pageParser parses the pages of one target. It is not safe for concurrent
// use: each target has its own.
type pageParser struct {
	series  map[string]*cachedSeries
	parses  uint64
	symbols *labels.SymbolTable
	lset    labels.Labels
	// Window bounds exporter timestamps; DefaultTimestampWindow if zero.
	Window time.Duration
}

func newPageParser() *pageParser {
	return &pageParser{series: map[string]*cachedSeries{}, symbols: labels.NewSymbolTable()}
}

// checkEvery is how many series pass between looks at the context: often
// enough that a cancelled parse of a huge page stops within milliseconds,
// rarely enough to cost nothing on an ordinary one.
const checkEvery = 4096

// parse reads page, whose Content-Type is contentType (an empty or unknown
// one is read as the text format, as Prometheus does). Series without a
// timestamp are stamped with at. It gives up when ctx ends, and fails the
// whole page on anything wrong: nothing of a bad page is stored.
func (pp *pageParser) parse(ctx context.Context, page []byte, contentType string, at time.Time, lim Limits) (*sampleSet, error) {
	lim = lim.withDefaults()
	if i := indexNUL(page); i >= 0 {
		return nil, scrapeErr(ReasonParse, "page holds a NUL byte at offset %d", i)
	}
	mediaType, err := pageMediaType(contentType)
	if err != nil {
		return nil, err
	}
	var p textparse.Parser
	if mediaType == contentTypeOpenMetrics {
		p = textparse.NewOpenMetricsParser(page, pp.symbols)
	} else {
		p = textparse.NewPromParser(page, pp.symbols, false)
	}
	window := pp.Window
	if window <= 0 {
		window = DefaultTimestampWindow
	}
	pp.parses++
	set := newSampleSet(0)
	// types holds the declared type of the stored families seen so far.
	var types [5]model.MetricType
	n := 0
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, scrapeErr(ReasonParse, "parse %s exposition: %w", formatName(mediaType), err)
		}
		switch e {
		case textparse.EntryType:
			name, typ := p.Type()
			if m := fieldIndex(name); m >= 0 {
				types[m] = typ
			}
			continue
		case textparse.EntrySeries, textparse.EntryHistogram:
		default:
			continue
		}
		if n++; n > lim.SampleLimit {
			return nil, scrapeErr(ReasonSampleLimit, "page holds more than %d series (sample_limit)", lim.SampleLimit)
		}
		if n%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if e == textparse.EntryHistogram {
			continue
		}
		met, ts, v := p.Series()
		cs := pp.lookup(p, met)
		if cs == nil {
			continue
		}
		if cs.err != nil {
			return nil, scrapeErr(ReasonParse, "%w", cs.err)
		}
		switch types[cs.metric] {
		case model.MetricTypeHistogram, model.MetricTypeGaugeHistogram, model.MetricTypeSummary:
			return nil, scrapeErr(ReasonParse, "metric %s: type %s has no single value", Metrics[cs.metric], types[cs.metric])
		}
		t := at
		if ts != nil {
			t = time.UnixMilli(*ts)
			if d := t.Sub(at); d > window || d < -window {
				return nil, scrapeErr(ReasonInvalid, "metric %s GPU %s: timestamp %s is more than %s from the scrape time %s",
					Metrics[cs.metric], cs.labels.uuid, t.UTC().Format(time.RFC3339Nano), window, at.UTC().Format(time.RFC3339Nano))
			}
		}
		if err := checkValue(cs.metric, v); err != nil {
			return nil, scrapeErr(ReasonInvalid, "metric %s GPU %s: %w", Metrics[cs.metric], cs.labels.uuid, err)
		}
		if _, err := set.addLabels(cs.metric, &cs.labels, v, t); err != nil {
			return nil, scrapeErr(ReasonParse, "%w", err)
		}
	}
	pp.sweep()
	return set, nil
}

// lookup returns the cached resolution of the series met, resolving it on
// first sight; nil for a series of a family the collector does not store.
func (pp *pageParser) lookup(p textparse.Parser, met []byte) *cachedSeries {
	if cs, ok := pp.series[string(met)]; ok {
		cs.seen = pp.parses
		return cs
	}
	name, quoted := seriesName(met)
	if !quoted && fieldIndex(name) < 0 {
		return nil
	}
	p.Labels(&pp.lset)
	m := fieldIndex(pp.lset.Get(model.MetricNameLabel))
	if m < 0 {
		return nil
	}
	cs := &cachedSeries{metric: m, seen: pp.parses}
	cs.labels = resolveLabels(pp.lset.Get)
	cs.err = checkLabels(Metrics[m], pp.lset)
	if cs.err == nil && cs.labels.shareErr != nil {
		cs.err = fmt.Errorf("metric %s GPU %s: %w", Metrics[m], cs.labels.uuid, cs.labels.shareErr)
	}
	pp.series[string(met)] = cs
	return cs
}

// sweep forgets series the last page did not have, once they are as many as
// those it had: a GPU's pods come and go, and their series would otherwise
// pile up for as long as the collector runs.
func (pp *pageParser) sweep() {
	stale := 0
	for _, cs := range pp.series {
		if cs.seen != pp.parses {
			stale++
		}
	}
	if stale*2 < len(pp.series) {
		return
	}
	for k, cs := range pp.series {
		if cs.seen != pp.parses {
			delete(pp.series, k)
		}
	}
}

// seriesName is the metric name at the start of a series' bytes; quoted says
// the name is inside the braces (the UTF-8 form), so only the labels tell.
func seriesName(met []byte) (name []byte, quoted bool) {
	for i, c := range met {
		if c == '{' {
			return met[:i], i == 0
		}
	}
	return met, false
}

// parseGPUIndex reads a gpu label as dcgm-exporter prints it.
func parseGPUIndex(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err == nil && n < 0 {
		err = fmt.Errorf("negative index %d", n)
	}
	return n, err
}

// pageMediaType reads a page's Content-Type. A missing or unknown one is
// read as the text format, as Prometheus does; protobuf, which the collector
// never asks for, is refused.
func pageMediaType(contentType string) (string, error) {
	if contentType == "" {
		return contentTypeText, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return contentTypeText, nil
	}
	switch mt {
	case contentTypeOpenMetrics:
		return mt, nil
	case "application/vnd.google.protobuf":
		return "", scrapeErr(ReasonParse, "Content-Type %q: want %s or %s", contentType, contentTypeText, contentTypeOpenMetrics)
	}
	return contentTypeText, nil
}

func formatName(mediaType string) string {
	if mediaType == contentTypeOpenMetrics {
		return "OpenMetrics"
	}
	return "text"
}

// indexNUL finds a NUL byte, which no exposition format allows and Postgres
// refuses in text.
func indexNUL(page []byte) int { return bytes.IndexByte(page, 0) }

// Highest GPU index gpu_samples.gpu_index (smallint) holds.
const maxGPUIndex = math.MaxInt16

// checkLabels holds the labels the collector stores to what their columns
// take: a UUID, and a GPU index that fits the column. (The parsers already
// refuse label values that are not UTF-8, which Postgres would refuse.)
func checkLabels(metric string, ls labels.Labels) error {
	if ls.Get(labelUUID) == "" {
		return missingUUID(metric)
	}
	if gpu := ls.Get(labelGPU); gpu != "" {
		if n, err := parseGPUIndex(gpu); err != nil || n > maxGPUIndex {
			return fmt.Errorf("metric %s GPU %s: label %s=%q is not a GPU index (0..%d)", metric, ls.Get(labelUUID), labelGPU, gpu, maxGPUIndex)
		}
	}
	return nil
}

// valueRange is what each stored field may hold: GPU_UTIL is a percentage,
// the PROF fields are ratios, and memory and power are non-negative and fit
// the real column.
var valueRange = [...]struct{ max float64 }{
	{100}, {1}, {1}, {math.MaxFloat32}, {math.MaxFloat32},
}

func checkValue(m int, v float64) error {
	if math.IsNaN(v) || v < 0 || v > valueRange[m].max {
		return fmt.Errorf("value %v outside [0, %v]", v, valueRange[m].max)
	}
	return nil
}

// ParseExporter reads one dcgm-exporter /metrics page in the format its
// Content-Type names; an unknown format is read as the Prometheus text
// format, as Prometheus itself does. Series without a timestamp, which is all
// of dcgm-exporter's, are stamped with at.
//
// Metrics other than the five in Metrics are ignored, their series counted
// against the default sample limit but their labels never built. A page the
// exposition parser rejects yields an error naming what it found; a DCGM
// series without a UUID label, with a GPU index or value outside what its
// column holds, or with a timestamp far from at, yields an error naming the
// metric, since the page is then not dcgm-exporter's.
func ParseExporter(page []byte, contentType string, at time.Time) ([]schedloop.GPUSample, error) {
	set, err := newPageParser().parse(context.Background(), page, contentType, at, Limits{})
	if err != nil {
		return nil, err
	}
	return set.sorted(), nil
}

// ParseExporterText reads a page in the Prometheus text format.
func ParseExporterText(page []byte, at time.Time) ([]schedloop.GPUSample, error) {
	return ParseExporter(page, contentTypeText, at)
}
