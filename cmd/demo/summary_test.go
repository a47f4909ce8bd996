package main

import (
	"strings"
	"testing"
)

func TestChange(t *testing.T) {
	tests := []struct {
		before, after float64
		want          string
	}{
		{5.9, 5.8, "-1.7%"},
		{0.001, 0.0195, "no change"}, // both print as 0.0 s
		{0, 0, "no change"},
		{0, 2, "n/a"},
		{2, 3, "+50.0%"},
	}
	for _, tc := range tests {
		if got := change(tc.before, tc.after); got != tc.want {
			t.Errorf("change(%v, %v) = %q, want %q", tc.before, tc.after, got, tc.want)
		}
	}
}

// The predicted column shows the tuner's whole-window expectation of the
// published profile and its change from the current profile's beside what
// the replays measured, and stays empty without a published profile.
func TestSummaryPrintsPredictions(t *testing.T) {
	s := Summary{Speed: 400, Published: true, Accepted: true, Reason: "held-out gain 12.8%", StartLatencySeconds: 0.12,
		Before: PhaseSummary{Profile: "stock", GPUIdleShare: 0.011, MeanJCTSeconds: 5.9, MeanQueueSeconds: 3, QueueShare: 3 / 5.9},
		After:  PhaseSummary{Profile: "tuned", GPUIdleShare: 0, MeanJCTSeconds: 5.8, MeanQueueSeconds: 1.5, QueueShare: 1.5 / 5.8},
		Predicted: map[string]float64{"gain": 0.128, "gpu_idle_share": 0.5, "baseline_gpu_idle_share": 0.6,
			"window_gpu_idle_share": 0.002, "window_baseline_gpu_idle_share": 0.012,
			"window_mean_jct_s": 5.0, "window_baseline_mean_jct_s": 6.0, "mean_jct_s": 1, "baseline_mean_jct_s": 2}}
	var out strings.Builder
	s.print(&out)
	// Columns are padded: compare with runs of spaces collapsed.
	flat := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{"change predicted after (change) GPU idle share", "-1.1 pts 0.2% (-1.0 pts) mean JCT",
		"-1.7% 5.0 s [33m] (-16.7%) p95 JCT", "mean queueing (share of JCT) 3.0 s [20m] (51%) 1.5 s [10m] (26%) -50.0% high-priority",
		"the jobs that had room after its placement (median 0.120 s)", "mean JCT predicted 5.00 s, measured 5.80 s (+16.0%)",
		"the same replay under stock: mean JCT 6.00 s, measured 5.90 s (-1.7%)", "guardrails: published (held-out gain 12.8%)"} {
		if !strings.Contains(flat, want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	s.Predicted = nil
	out.Reset()
	s.print(&out)
	if strings.Contains(out.String(), "predicted (stored") || strings.Contains(out.String(), "-16.7%") || strings.Contains(out.String(), "the same replay") {
		t.Errorf("summary without a prediction shows one:\n%s", out.String())
	}
}

// The summary says what the guardrails decided whether or not the profile
// reached the scheduler.
func TestSummarySaysWhatTheGuardrailsDecided(t *testing.T) {
	for _, tc := range []struct {
		published, accepted bool
		want                string
	}{
		{true, true, "guardrails: published (why); the after replay ran under the tuned profile"},
		{true, false, "guardrails: refused (why); -publish=always published the tuned profile anyway"},
		{false, false, "guardrails: refused (why); the scheduler kept profile stock, so both replays ran under it"},
	} {
		s := Summary{Published: tc.published, Accepted: tc.accepted, Reason: "why", Before: PhaseSummary{Profile: "stock"}}
		var out strings.Builder
		s.print(&out)
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("published %v, accepted %v: summary lacks %q:\n%s", tc.published, tc.accepted, tc.want, out.String())
		}
	}
}
