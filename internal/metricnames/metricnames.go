// Package metricnames holds schedloop's metrics to Prometheus's naming
// rules: promlint's checks plus schedloop_<subsystem>_<name>[_<unit>] with
// a known subsystem. Tests of each service's /metrics call it; it must not
// register or serve metrics itself.
package metricnames

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Subsystems are the rooms schedloop's metrics are named by.
var Subsystems = []string{"collector", "gpu", "events", "scheduler", "tuner", "api", "ingest"}

// Problems lints families, every family given by promlint's rules and those
// named schedloop_ by the subsystem rule, and lists what is wrong.
func Problems(families []*dto.MetricFamily) ([]string, error) {
	lint, err := promlint.NewWithMetricFamilies(families).Lint()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range lint {
		out = append(out, fmt.Sprintf("%s: %s", p.Metric, p.Text))
	}
	for _, f := range families {
		name := f.GetName()
		rest, ok := strings.CutPrefix(name, "schedloop_")
		if !ok {
			continue
		}
		sub, tail, _ := strings.Cut(rest, "_")
		if !slices.Contains(Subsystems, sub) || tail == "" {
			out = append(out, fmt.Sprintf("%s: want schedloop_<subsystem>_<name>[_<unit>] with a subsystem of %v", name, Subsystems))
		}
	}
	return out, nil
}

// Scrape reads the families a /metrics endpoint serves at url, so each
// service's lint test reads its real handler the same way.
func Scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s = %d", url, resp.StatusCode)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	return tp.TextToMetricFamilies(resp.Body)
}
