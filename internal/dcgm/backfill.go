package dcgm

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/schedloop/schedloop"
)

// Defaults of Backfill. Prometheus refuses range queries of more than 11,000
// points per series, so longer ranges are split into windows.
const (
	DefaultBackfillStep = 30 * time.Second
	maxPointsPerQuery   = 11000
)

// Backfill reads dcgm-exporter series that a Prometheus server already
// scraped, so history from before the collector ran can be loaded.
type Backfill struct {
	API v1.API
	// Step is the resolution of the returned samples; it defaults to
	// DefaultBackfillStep.
	Step time.Duration
	// Matchers are extra PromQL label matchers ANDed to the selector, for
	// example `cluster="gpu-a"`.
	Matchers string
	// Logger receives Prometheus query warnings; nil discards them.
	Logger *slog.Logger
}

// NewBackfill returns a Backfill reading from the Prometheus server at address.
func NewBackfill(address string, step time.Duration) (*Backfill, error) {
	c, err := api.NewClient(api.Config{Address: address})
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %s: %w", address, err)
	}
	return &Backfill{API: v1.NewAPI(c), Step: step}, nil
}

// Query is the PromQL selector Backfill runs: all five metrics in one query,
// so one round trip returns every field of every GPU.
func (b *Backfill) Query() string {
	sel := `__name__=~"` + strings.Join(Metrics, "|") + `"`
	if m := strings.TrimSpace(b.Matchers); m != "" {
		sel += "," + m
	}
	return "{" + sel + "}"
}

// Range returns one sample per GPU (and pod attribution) per step in
// [start, end], sorted by time.
func (b *Backfill) Range(ctx context.Context, start, end time.Time) ([]schedloop.GPUSample, error) {
	if b.API == nil {
		return nil, fmt.Errorf("prometheus backfill: no API configured")
	}
	if end.Before(start) {
		return nil, fmt.Errorf("prometheus backfill: end %s is before start %s", end.Format(time.RFC3339), start.Format(time.RFC3339))
	}
	step := b.Step
	if step <= 0 {
		step = DefaultBackfillStep
	}
	query := b.Query()
	window := step * (maxPointsPerQuery - 1)
	var matrix model.Matrix
	for from := start; !from.After(end); from = from.Add(window + step) {
		to := from.Add(window)
		if to.After(end) {
			to = end
		}
		r := v1.Range{Start: from, End: to, Step: step}
		val, warnings, _, err := b.API.QueryRange(ctx, query, r)
		if err != nil {
			return nil, fmt.Errorf("prometheus query_range %s from %s to %s step %s: %w", query, from.Format(time.RFC3339), to.Format(time.RFC3339), step, err)
		}
		if len(warnings) > 0 && b.Logger != nil {
			b.Logger.WarnContext(ctx, "prometheus query_range warnings", "query", query, "from", from, "to", to, "warnings", []string(warnings))
		}
		m, ok := val.(model.Matrix)
		if !ok {
			return nil, fmt.Errorf("prometheus query_range %s: got a %s result, want a matrix", query, val.Type())
		}
		matrix = append(matrix, m...)
	}
	return samplesFromMatrix(matrix)
}

// samplesFromMatrix merges the per-metric series of a range query into samples.
func samplesFromMatrix(m model.Matrix) ([]schedloop.GPUSample, error) {
	n := 0
	for _, ss := range m {
		n += len(ss.Values)
	}
	set := newSampleSet(n / len(Metrics))
	// Prometheus stores no empty labels, so a GPU without a pod has no
	// exported_pod label at all; if any series was renamed, the plain pod
	// labels of the others are the exporter's own too and must not be read
	// as the GPU's user.
	for _, ss := range m {
		for _, name := range []string{labelPod, labelNamespace, labelContainer} {
			if _, ok := ss.Metric[model.LabelName(exportedPrefix+name)]; ok {
				set.targetLabelsRenamed = true
			}
		}
	}
	for _, ss := range m {
		metric := string(ss.Metric[model.MetricNameLabel])
		label := func(name string) string { return string(ss.Metric[model.LabelName(name)]) }
		for _, p := range ss.Values {
			if err := set.add(metric, label, float64(p.Value), p.Timestamp.Time().UTC()); err != nil {
				return nil, err
			}
		}
	}
	return set.sorted(), nil
}
