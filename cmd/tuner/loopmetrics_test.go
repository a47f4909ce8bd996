package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/metricnames"
)

// loopMetric is the value of the family name (of its series with
// outcome=outcome, when given) that a loop printing out serves.
func loopMetric(out, name, outcome string) (float64, error) {
	_, rest, ok := strings.Cut(out, "tuner loop: metrics on ")
	if !ok {
		return 0, errors.New("the loop printed no metrics address")
	}
	url, _, _ := strings.Cut(rest, "\n")
	families, err := metricnames.Scrape(url)
	if err != nil {
		return 0, err
	}
	for _, m := range families[name].GetMetric() {
		if outcome == "" {
			return m.GetGauge().GetValue(), nil
		}
		if l := m.GetLabel(); len(l) == 1 && l[0].GetValue() == outcome {
			return m.GetCounter().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("%s has no series %q", name, outcome)
}

// TestLoopMetricsLint runs promlint and schedloop's naming rule over the
// loop's /metrics as its server serves it, after a pass was recorded.
func TestLoopMetricsLint(t *testing.T) {
	m := newLoopMetrics()
	pr, pw := io.Pipe()
	lines := bufio.NewReader(pr)
	urlc := make(chan string, 1)
	go func() {
		line, _ := lines.ReadString('\n')
		urlc <- strings.TrimSpace(strings.TrimPrefix(line, "tuner loop: metrics on "))
		io.Copy(io.Discard, lines)
	}()
	stop, err := m.serve(context.Background(), "127.0.0.1:0", pw)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stop(); pw.Close() }()
	url := <-urlc
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	m.leader.Set(1)
	m.pass(passTuned, start, 3*time.Second)

	families, err := metricnames.Scrape(url)
	if err != nil {
		t.Fatal(err)
	}
	runs := families["schedloop_tuner_runs_total"]
	if runs == nil {
		t.Fatalf("/metrics has no schedloop_tuner_runs_total")
	}
	byOutcome := map[string]float64{}
	for _, mt := range runs.GetMetric() {
		byOutcome[mt.GetLabel()[0].GetValue()] = mt.GetCounter().GetValue()
	}
	if want := map[string]float64{passTuned: 1, passWaiting: 0, passError: 0}; !maps.Equal(byOutcome, want) {
		t.Errorf("schedloop_tuner_runs_total = %v, want %v", byOutcome, want)
	}
	gauges := map[string]float64{
		"schedloop_tuner_last_run_timestamp_seconds": float64(start.Unix()),
		"schedloop_tuner_last_run_duration_seconds":  3,
		"schedloop_tuner_leader":                     1,
	}
	for name, want := range gauges {
		if f := families[name]; f == nil || f.GetMetric()[0].GetGauge().GetValue() != want {
			t.Errorf("/metrics %s = %v, want %v", name, f, want)
		}
	}
	if families["go_goroutines"] == nil {
		t.Error("/metrics has no go_goroutines")
	}
	problems, err := metricnames.Problems(slices.Collect(maps.Values(families)))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
