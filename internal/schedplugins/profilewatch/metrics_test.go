package profilewatch

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/schedloop/schedloop/internal/metricnames"
)

// TestSchedulerMetricsLint runs promlint over the metrics schedloop adds to
// the scheduler's /metrics (kube-scheduler's own registry). Upstream's
// families are kube-scheduler's to name and are left out.
func TestSchedulerMetricsLint(t *testing.T) {
	registerMetrics()
	reloads.WithLabelValues("success").Inc()
	generation.Set(1)
	activeInfo.WithLabelValues("p", "h").Set(1)
	all, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var ours []*dto.MetricFamily
	for _, f := range all {
		if strings.HasPrefix(f.GetName(), "schedloop_") {
			ours = append(ours, f)
		}
	}
	if len(ours) != 3 {
		t.Fatalf("%d schedloop families in the scheduler's registry, want the 3 of profilewatch", len(ours))
	}
	problems, err := metricnames.Problems(ours)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
