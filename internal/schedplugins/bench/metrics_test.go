package bench_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/schedloop/schedloop/internal/harness"
)

// The scheduler's own histograms say where a run's time went: the sum of
// every extension point per profile, and of every plugin at each point.
// They are cumulative over the process, so a run reports the difference
// between snapshots taken before and after it.
var breakdownFamilies = []string{
	"scheduler_framework_extension_point_duration_seconds",
	"scheduler_plugin_execution_duration_seconds",
	"scheduler_scheduling_algorithm_duration_seconds",
	"scheduler_permit_wait_duration_seconds",
	"scheduler_schedule_attempts_total",
	// What the scheduler asked of the apiserver (same process): writes
	// compete with bindings for the apiserver's and etcd's time.
	"apiserver_request_total",
}

type histTotal struct {
	sum     float64
	count   uint64
	counter bool
}

type metricSnapshot map[string]histTotal

func snapshot(tb testing.TB) metricSnapshot {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		tb.Fatalf("gather scheduler metrics: %v", err)
	}
	s := metricSnapshot{}
	for _, f := range families {
		if !slices.Contains(breakdownFamilies, f.GetName()) {
			continue
		}
		for _, m := range f.GetMetric() {
			name := seriesName(f.GetName(), m.GetLabel())
			if h := m.GetHistogram(); h != nil {
				s[name] = histTotal{sum: h.GetSampleSum(), count: h.GetSampleCount()}
			} else if c := m.GetCounter(); c != nil {
				// A counter shows as its count, with no time.
				s[name] = histTotal{count: uint64(c.GetValue()), counter: true}
			}
		}
	}
	return s
}

func seriesName(family string, labels []*dto.LabelPair) string {
	parts := make([]string, 0, len(labels))
	for _, l := range labels {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return strings.TrimPrefix(family, "scheduler_") + "{" + strings.Join(parts, ",") + "}"
}

// breakdown lists the series that grew between before and after: counters
// (largest first, all of them), then durations, largest total time first,
// up to limit lines. Plugin durations are sampled (10% of cycles upstream),
// so their sums are a tenth of the time spent; compare them with each other.
func breakdown(before, after metricSnapshot, limit int) string {
	type row struct {
		name  string
		sum   float64
		count uint64
	}
	var counters, durations []row
	for name, a := range after {
		b := before[name]
		if a.count <= b.count {
			continue
		}
		r := row{name, a.sum - b.sum, a.count - b.count}
		if a.counter {
			r.sum = float64(r.count)
			counters = append(counters, r)
		} else {
			durations = append(durations, r)
		}
	}
	bySum := func(x, y row) int {
		switch {
		case x.sum > y.sum:
			return -1
		case x.sum < y.sum:
			return 1
		}
		return strings.Compare(x.name, y.name)
	}
	slices.SortFunc(counters, bySum)
	slices.SortFunc(durations, bySum)
	var b strings.Builder
	for _, r := range counters {
		fmt.Fprintf(&b, "  %10s %8d  %s\n", "", r.count, r.name)
	}
	for i, r := range durations {
		if i == limit {
			break
		}
		fmt.Fprintf(&b, "  %9.3fs %8d  %s\n", r.sum, r.count, r.name)
	}
	return b.String()
}

var digits = regexp.MustCompile(`[0-9]+`)

// failures counts the run's FailedScheduling events by message, with
// numbers masked so one reason is one line. Events are written
// asynchronously: the count is a lower bound.
func failures(tb testing.TB, c *harness.Cluster, limit int) string {
	list, err := c.Client.EventsV1().Events("default").List(tb.Context(), metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
	if err != nil {
		return fmt.Sprintf("  list events: %v\n", err)
	}
	byNote := map[string]int{}
	for _, e := range list.Items {
		n := 1
		if e.Series != nil {
			n = int(e.Series.Count)
		}
		byNote[digits.ReplaceAllString(e.Note, "N")] += n
	}
	notes := make([]string, 0, len(byNote))
	for n := range byNote {
		notes = append(notes, n)
	}
	slices.SortFunc(notes, func(a, b string) int {
		if byNote[a] != byNote[b] {
			return byNote[b] - byNote[a]
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	for i, n := range notes {
		if i == limit {
			break
		}
		fmt.Fprintf(&b, "  %8d  %s\n", byNote[n], n)
	}
	return b.String()
}
