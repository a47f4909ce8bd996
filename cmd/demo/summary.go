package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/tuner"
)

// Each phase is one namespace; its jobs are those created in it since the
// phase began, and its GPU window is the span from its first job's creation
// to its last job's end. The store reads both (store.NamespaceJobSpan,
// NamespaceJCT, IdleSamplesByRound).

// PhaseSummary is one replay's figures, all read from Postgres.
type PhaseSummary struct {
	Phase     string    `json:"phase"`
	Namespace string    `json:"namespace"`
	Profile   string    `json:"profile"`
	Began     time.Time `json:"began"`
	// WindowFrom and WindowTo bound the GPU samples counted: the first
	// job's creation to the last job's end.
	WindowFrom time.Time `json:"windowFrom"`
	WindowTo   time.Time `json:"windowTo"`
	// RoundSeconds is the scrape round GPU samples are grouped by.
	RoundSeconds float64 `json:"roundSeconds"`

	Jobs         int `json:"jobs"`
	FinishedJobs int `json:"finishedJobs"`

	// GPUSamples counts (GPU, scrape round) pairs; IdleGPUSamples those
	// allocated but idle or unallocated while demand waited.
	GPUSamples     int64   `json:"gpuSamples"`
	IdleGPUSamples int64   `json:"idleGpuSamples"`
	GPUIdleShare   float64 `json:"gpuIdleShare"`

	MeanJCTSeconds float64 `json:"meanJctSeconds"`
	P95JCTSeconds  float64 `json:"p95JctSeconds"`
	// MeanQueueSeconds is the mean of created to admitted (else first
	// bound); QueueShare is it over MeanJCTSeconds.
	MeanQueueSeconds           float64 `json:"meanQueueSeconds"`
	QueueShare                 float64 `json:"queueShare"`
	HighPriorityJobs           int     `json:"highPriorityJobs"`
	HighPriorityP95WaitSeconds float64 `json:"highPriorityP95WaitSeconds"`
}

// Summary is what the demo prints at the end.
type Summary struct {
	Trace string  `json:"trace"`
	Speed float64 `json:"speed"`
	// Compress is how much closer together arrivals came than in the trace.
	Compress float64 `json:"compress"`
	// Published: the tuned profile reached the scheduler; Accepted: the
	// tuner's guardrails would have published it on their own.
	Published bool         `json:"published"`
	Accepted  bool         `json:"accepted"`
	Reason    string       `json:"reason"`
	Before    PhaseSummary `json:"before"`
	After     PhaseSummary `json:"after"`
	Dashboard string       `json:"dashboard"`
	// Predicted is what the tuner expected of the published profile, as
	// stored with it in Postgres (tuner.Report.Predicted: the held-out
	// replays' metric and baseline_metric values, the whole window's under
	// tuner.WindowPrefix); nil when nothing was published.
	Predicted map[string]float64 `json:"predicted,omitempty"`
	// StartLatencySeconds is the median of the start latencies the tuner's
	// replays gave the jobs (tuner.StartLatency, from the first replay's
	// stored waits; each job had one of tuner.StartLatencies).
	StartLatencySeconds float64 `json:"startLatencySeconds"`
}

// readPhase fills a phase's figures from the database.
func readPhase(ctx context.Context, s *store.Store, p *PhaseSummary, threshold float64) error {
	span, err := s.NamespaceJobSpan(ctx, p.Namespace, p.Began)
	if err != nil {
		return err
	}
	p.Jobs, p.WindowFrom, p.WindowTo = span.Jobs, span.From, span.To
	jct, err := s.NamespaceJCT(ctx, p.Namespace, p.Began, HighPriority)
	if err != nil {
		return err
	}
	p.FinishedJobs, p.MeanJCTSeconds, p.MeanQueueSeconds = jct.Finished, jct.MeanJCTSeconds, jct.MeanQueueSeconds
	p.P95JCTSeconds = jct.P95JCTSeconds
	p.QueueShare = jct.QueueShare()
	p.HighPriorityJobs, p.HighPriorityP95WaitSeconds = jct.HighPriorityJobs, jct.HighPriorityP95WaitSeconds
	round := time.Duration(p.RoundSeconds * float64(time.Second))
	if p.IdleGPUSamples, p.GPUSamples, err = s.IdleSamplesByRound(ctx, p.WindowFrom, p.WindowTo, threshold, round); err != nil {
		return err
	}
	if p.GPUSamples > 0 {
		p.GPUIdleShare = float64(p.IdleGPUSamples) / float64(p.GPUSamples)
	}
	return nil
}

// print writes the before/after table. Times are wall seconds as stored;
// the trace time they stand for (x speed) is in brackets.
func (s Summary) print(w io.Writer) {
	fmt.Fprintf(w, "\nsummary (read from Postgres; times are wall seconds at %gx, trace time in brackets)\n", s.Speed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\tbefore: %s\tafter: %s\tchange\tpredicted after (change)\n", s.Before.Profile, s.After.Profile)
	b, a := s.Before, s.After
	pts := func(before, after float64) string { return fmt.Sprintf("%+.1f pts", 100*(after-before)) }
	fmt.Fprintf(tw, "GPU idle share\t%.1f%% of %d samples\t%.1f%% of %d samples\t%s\t%s\n",
		100*b.GPUIdleShare, b.GPUSamples, 100*a.GPUIdleShare, a.GPUSamples, pts(b.GPUIdleShare, a.GPUIdleShare),
		s.predicted("gpu_idle_share", func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }, pts))
	fmt.Fprintf(tw, "mean JCT\t%s\t%s\t%s\t%s\n", s.seconds(b.MeanJCTSeconds), s.seconds(a.MeanJCTSeconds),
		change(b.MeanJCTSeconds, a.MeanJCTSeconds), s.predicted("mean_jct_s", s.seconds, change))
	fmt.Fprintf(tw, "p95 JCT\t%s\t%s\t%s\t%s\n", s.seconds(b.P95JCTSeconds), s.seconds(a.P95JCTSeconds),
		change(b.P95JCTSeconds, a.P95JCTSeconds), s.predicted("p95_jct_s", s.seconds, change))
	fmt.Fprintf(tw, "mean queueing (share of JCT)\t%s (%.0f%%)\t%s (%.0f%%)\t%s\t\n", s.seconds(b.MeanQueueSeconds), 100*b.QueueShare,
		s.seconds(a.MeanQueueSeconds), 100*a.QueueShare, change(b.MeanQueueSeconds, a.MeanQueueSeconds))
	fmt.Fprintf(tw, "high-priority p95 wait\t%s\t%s\t%s\t%s\n", s.seconds(b.HighPriorityP95WaitSeconds), s.seconds(a.HighPriorityP95WaitSeconds),
		change(b.HighPriorityP95WaitSeconds, a.HighPriorityP95WaitSeconds), s.predicted("p95_high_priority_wait_s", s.seconds, change))
	fmt.Fprintf(tw, "jobs finished (high priority)\t%d/%d (%d)\t%d/%d (%d)\t\t\n", b.FinishedJobs, b.Jobs, b.HighPriorityJobs, a.FinishedJobs, a.Jobs, a.HighPriorityJobs)
	tw.Flush()
	fmt.Fprintln(w, s.verdict())
	fmt.Fprintf(w, "both replays: the same %d jobs from %s, arrivals %gx closer than the trace's; dashboard %s\n", b.Jobs, s.Trace, s.Compress, s.Dashboard)
	if p, ok := s.Predicted[tuner.WindowPrefix+"mean_jct_s"]; ok && a.MeanJCTSeconds > 0 {
		fmt.Fprintf(w, "predicted (stored with the profile): the tuner's replay of the first replay's jobs under each profile, run times predicted from the published table, each job started one of the stored waits of the jobs that had room after its placement (median %.3f s); mean JCT predicted %.2f s, measured %.2f s (%+.1f%%)\n",
			s.StartLatencySeconds, p, a.MeanJCTSeconds, 100*(a.MeanJCTSeconds-p)/p)
	}
	// The same replay under the profile the first replay ran under checks
	// the simulator on jobs whose measurement it has seen: what it misses
	// here (the control plane's timing beyond the start latency it models)
	// it misses in the prediction too.
	if p, ok := s.Predicted[tuner.WindowPrefix+"baseline_mean_jct_s"]; ok && b.MeanJCTSeconds > 0 {
		fmt.Fprintf(w, "the same replay under %s: mean JCT %.2f s, measured %.2f s (%+.1f%%)\n", b.Profile, p, b.MeanJCTSeconds, 100*(b.MeanJCTSeconds-p)/p)
	}
}

// verdict says what the guardrails decided and what reached the scheduler.
func (s Summary) verdict() string {
	switch {
	case s.Accepted:
		return fmt.Sprintf("guardrails: published (%s); the after replay ran under the tuned profile", s.Reason)
	case s.Published:
		return fmt.Sprintf("guardrails: refused (%s); -publish=always published the tuned profile anyway, so the after replay shows what they kept out", s.Reason)
	}
	return fmt.Sprintf("guardrails: refused (%s); the scheduler kept profile %s, so both replays ran under it", s.Reason, s.Before.Profile)
}

// predicted formats the tuner's whole-window prediction of metric under the
// published profile, and its change from the current profile's (""
// without a prediction).
func (s Summary) predicted(metric string, value func(float64) string, change func(before, after float64) string) string {
	before, okB := s.Predicted[tuner.WindowPrefix+"baseline_"+metric]
	after, okA := s.Predicted[tuner.WindowPrefix+metric]
	if !okB || !okA {
		return ""
	}
	return fmt.Sprintf("%s (%s)", value(after), change(before, after))
}

func (s Summary) seconds(v float64) string {
	d := time.Duration(v * s.Speed * float64(time.Second)).Round(time.Minute)
	trace := d.String()
	if strings.HasSuffix(trace, "m0s") {
		trace = strings.TrimSuffix(trace, "0s")
	}
	return fmt.Sprintf("%.1f s [%s]", v, trace)
}

// change is after's relative change from before, for figures printed to
// 0.1 s: a difference the table cannot show (0.0 s against 0.0 s) is no
// change, not +95%.
func change(before, after float64) string {
	const shown = 0.05
	switch {
	case math.Abs(after-before) < shown:
		return "no change"
	case before == 0:
		return "n/a"
	}
	return fmt.Sprintf("%+.1f%%", 100*(after-before)/before)
}

func (s Summary) writeJSON(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("flag -summary-out: %w", err)
	}
	return nil
}
