package collector_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/metricnames"
)

// TestMetricsLint holds every family of the collector's own metrics to
// promtool's rules (base units among them: GPU time by state is in seconds,
// not minutes), the labelled ones with a child so they are linted at all.
func TestMetricsLint(t *testing.T) {
	m := collector.NewMetrics()
	m.NodeIdleShare.WithLabelValues("n1").Set(0.5)
	m.NamespaceIdleShare.WithLabelValues("ns").Set(0.5)
	m.StateSeconds.WithLabelValues("busy").Set(60)
	reg := prometheus.NewPedanticRegistry()
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != len(m.Collectors()) {
		t.Errorf("gathered %d families of %d collectors: one has no series to lint", len(families), len(m.Collectors()))
	}
	problems, err := metricnames.Problems(families)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
