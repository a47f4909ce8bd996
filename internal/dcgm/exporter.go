package dcgm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/schedloop/schedloop"
)

// ParseExporter reads one dcgm-exporter /metrics page in the format its
// Content-Type names (expfmt.ResponseFormat); an unknown format is read as
// the Prometheus text format, as Prometheus itself does. Series without a
// timestamp, which is all of dcgm-exporter's, are stamped with at.
//
// Metrics other than the five in Metrics are ignored; on dcgm-exporter's
// own layout their sample lines are not even validated (see fasttext.go).
// A page the exposition parser rejects otherwise yields an error naming the
// line; a DCGM series without a UUID label, or with a non-numeric gpu
// label, yields an error naming the metric, since the page is then not
// dcgm-exporter's.
func ParseExporter(r io.Reader, format expfmt.Format, at time.Time) ([]schedloop.GPUSample, error) {
	if isOpenMetrics(format) {
		set, err := parseOpenMetrics(r, format, at)
		if err != nil {
			return nil, err
		}
		return set.sorted(), nil
	}
	page, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read text exposition: %w", err)
	}
	set, err := parsePage(page, format, at)
	if err != nil {
		return nil, err
	}
	return set.sorted(), nil
}

// parsePage parses a whole page held in memory without copying it; the
// samples returned do not refer to page, so the caller may reuse it.
func parsePage(page []byte, format expfmt.Format, at time.Time) (*sampleSet, error) {
	if isOpenMetrics(format) {
		return parseOpenMetrics(bytes.NewReader(page), format, at)
	}
	if set, err, ok := parseTextFastSet(page, at); ok {
		return set, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return nil, fmt.Errorf("parse text exposition: %w", err)
	}
	fams := make([]*dto.MetricFamily, 0, len(Metrics))
	for _, name := range Metrics {
		if mf, ok := byName[name]; ok {
			fams = append(fams, mf)
		}
	}
	return setFromFamilies(fams, at)
}

// isOpenMetrics is format.FormatType() == expfmt.TypeOpenMetrics without
// FormatType's splitting and map for the formats a text scrape gets.
func isOpenMetrics(format expfmt.Format) bool {
	switch format {
	case expfmt.FmtText, expfmt.FmtUnknown:
		return false
	}
	return format.FormatType() == expfmt.TypeOpenMetrics
}

func parseOpenMetrics(r io.Reader, format expfmt.Format, at time.Time) (*sampleSet, error) {
	var fams []*dto.MetricFamily
	dec := expfmt.NewDecoder(r, format)
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parse OpenMetrics exposition: %w", err)
		}
		fams = append(fams, mf)
	}
	return setFromFamilies(fams, at)
}

// ParseExporterText reads a page in the Prometheus text format.
func ParseExporterText(page []byte, at time.Time) ([]schedloop.GPUSample, error) {
	// The page is already in memory: ParseExporter would copy it first.
	set, err := parsePage(page, expfmt.FmtText, at)
	if err != nil {
		return nil, err
	}
	return set.sorted(), nil
}

func samplesFromFamilies(fams []*dto.MetricFamily, at time.Time) ([]schedloop.GPUSample, error) {
	set, err := setFromFamilies(fams, at)
	if err != nil {
		return nil, err
	}
	return set.sorted(), nil
}

func setFromFamilies(fams []*dto.MetricFamily, at time.Time) (*sampleSet, error) {
	n := 0
	for _, mf := range fams {
		n += len(mf.GetMetric())
	}
	set := newSampleSet(n / len(Metrics))
	for _, mf := range fams {
		name := mf.GetName()
		var probe schedloop.GPUSample
		if !setField(&probe, name, 0) {
			continue
		}
		for _, m := range mf.GetMetric() {
			v, ok := metricValue(m)
			if !ok {
				return nil, fmt.Errorf("metric %s: type %s has no single value", name, mf.GetType())
			}
			t := at
			if m.TimestampMs != nil {
				t = time.UnixMilli(m.GetTimestampMs())
			}
			pairs := m.GetLabel()
			label := func(name string) string {
				for _, p := range pairs {
					if p.GetName() == name {
						return p.GetValue()
					}
				}
				return ""
			}
			if err := set.add(name, label, v, t); err != nil {
				return nil, err
			}
		}
	}
	return set, nil
}

// metricValue reads the value of a gauge, counter or untyped sample;
// dcgm-exporter declares its fields as gauges or counters.
func metricValue(m *dto.Metric) (float64, bool) {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue(), true
	case m.Counter != nil:
		return m.GetCounter().GetValue(), true
	case m.Untyped != nil:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}
