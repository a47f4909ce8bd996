package metricnames

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestProblems(t *testing.T) {
	tests := []struct {
		name, help string
		counter    bool
		want       string
	}{
		{"schedloop_collector_scrapes_total", "Scrapes.", true, ""},
		{"schedloop_collector_scrapes", "Scrapes.", true, "counter metrics should have \"_total\" suffix"},
		{"schedloop_collector_scrape_duration_milliseconds", "Duration.", false, "use base unit \"seconds\""},
		{"schedloop_wibble_things", "Things.", false, "want schedloop_<subsystem>_<name>"},
		{"schedloop_collector", "Nothing named.", false, "want schedloop_<subsystem>_<name>"},
		{"schedloop_gpu_stateMinutes", "Minutes.", false, "camelCase"},
	}
	for _, tt := range tests {
		reg := prometheus.NewRegistry()
		if tt.counter {
			reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: tt.name, Help: tt.help}))
		} else {
			reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: tt.name, Help: tt.help}))
		}
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Problems(fams)
		if err != nil {
			t.Fatal(err)
		}
		joined := strings.Join(got, "; ")
		if tt.want == "" && len(got) > 0 || tt.want != "" && !strings.Contains(joined, tt.want) {
			t.Errorf("%s: problems %q, want %q", tt.name, joined, tt.want)
		}
	}
}
