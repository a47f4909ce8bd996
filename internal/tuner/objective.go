package tuner

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/schedloop/schedloop/internal/sim"
)

// Metric names a replay or measured outcome. The names key the predicted and
// measured maps stored with each profile.
type Metric string

const (
	MetricGPUIdle          Metric = "gpu_idle_share"
	MetricMeanJCT          Metric = "mean_jct_s"
	MetricP95JCT           Metric = "p95_jct_s"
	MetricHighPriorityWait Metric = "p95_high_priority_wait_s"
	MetricFragmentation    Metric = "fragmentation_pct"
)

// Metrics lists every metric in a fixed order.
var Metrics = []Metric{MetricGPUIdle, MetricMeanJCT, MetricP95JCT, MetricHighPriorityWait, MetricFragmentation}

// floors keep a near-zero reference from turning noise into huge relative
// changes: below its floor a metric is compared against the floor.
var floors = map[Metric]float64{
	MetricGPUIdle: 0.01, MetricMeanJCT: 1, MetricP95JCT: 1, MetricHighPriorityWait: 1, MetricFragmentation: 0.1,
}

// Values is one outcome by metric name.
type Values map[Metric]float64

// ValuesOf extracts the objective's metrics from a replay.
func ValuesOf(m sim.Metrics) Values {
	return Values{
		MetricGPUIdle: m.GPUIdleShare, MetricMeanJCT: m.MeanJCT, MetricP95JCT: m.P95JCT,
		MetricHighPriorityWait: m.P95HighPriorityWait, MetricFragmentation: m.Fragmentation,
	}
}

// Objective weights the metrics; every metric is "lower is better".
type Objective map[Metric]float64

// DefaultObjective favours the product's first two numbers, GPU idle time
// and JCT, then the critical-job guarantee, then fragmentation.
func DefaultObjective() Objective {
	return Objective{MetricGPUIdle: 0.35, MetricMeanJCT: 0.3, MetricP95JCT: 0.1, MetricHighPriorityWait: 0.15, MetricFragmentation: 0.1}
}

// ParseObjective reads "gpu_idle_share=0.4,mean_jct_s=0.3,...".
func ParseObjective(s string) (Objective, error) {
	o := Objective{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("objective term %q: want name=weight", part)
		}
		m := Metric(strings.TrimSpace(name))
		if _, known := floors[m]; !known {
			return nil, fmt.Errorf("objective term %q: unknown metric (known: %s)", name, metricList())
		}
		var w float64
		if _, err := fmt.Sscan(strings.TrimSpace(val), &w); err != nil || w < 0 || math.IsInf(w, 0) || math.IsNaN(w) {
			return nil, fmt.Errorf("objective term %q: weight %q is not a non-negative number", name, val)
		}
		o[m] = w
	}
	total := 0.0
	for _, w := range o {
		total += w
	}
	if total == 0 {
		return nil, fmt.Errorf("objective %q: every weight is zero", s)
	}
	return o, nil
}

func metricList() string {
	s := make([]string, len(Metrics))
	for i, m := range Metrics {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

// String renders the objective in ParseObjective's form, in Metrics order.
func (o Objective) String() string {
	var parts []string
	for _, m := range Metrics {
		if w, ok := o[m]; ok {
			parts = append(parts, fmt.Sprintf("%s=%g", m, w))
		}
	}
	return strings.Join(parts, ",")
}

// Cost is v measured against ref: the weighted sum of v/ref per metric,
// normalised so ref itself costs 1. Lower is better.
func (o Objective) Cost(v, ref Values) float64 {
	var sum, total float64
	keys := make([]string, 0, len(o))
	for m := range o {
		keys = append(keys, string(m))
	}
	sort.Strings(keys)
	for _, k := range keys {
		m := Metric(k)
		w := o[m]
		if w == 0 {
			continue
		}
		den := math.Max(ref[m], floors[m])
		sum += w * math.Max(v[m], 0) / den
		total += w * math.Max(ref[m], 0) / den
	}
	if total == 0 {
		return 0
	}
	return sum / total
}

// Gain is the relative improvement of v over ref under o: 0.05 is 5% better.
func (o Objective) Gain(v, ref Values) float64 { return 1 - o.Cost(v, ref) }
