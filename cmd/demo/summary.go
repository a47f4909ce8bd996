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

	"github.com/jackc/pgx/v5/pgxpool"
)

// The demo's read-back queries. Each phase is one namespace; its jobs are
// those created in it since the phase began. Its GPU window is every whole
// minute from its first job's creation to its last job's end.

// phaseJobsSQL counts a phase's jobs and how many the collector has seen
// finish, and bounds the phase: first creation to last end. $1 namespace,
// $2 phase start.
const phaseJobsSQL = `
SELECT count(*), count(finished_at), coalesce(min(created_at), $2), coalesce(max(finished_at), $2)
FROM jobs WHERE namespace = $1 AND created_at >= $2`

// phaseJCTSQL: mean JCT of the phase's finished jobs and the p95 queueing
// time of its high-priority ones, from the job_jct view (JCT = queueing +
// running). A job's priority is the highest of its row and its pods' (the
// job row can miss the priority its pods were admitted with). $1 namespace,
// $2 phase start, $3 high priority.
const phaseJCTSQL = `
SELECT count(*),
       coalesce(avg(j.jct_seconds), 0),
       count(*) FILTER (WHERE pr.priority >= $3),
       coalesce(percentile_disc(0.95) WITHIN GROUP (ORDER BY j.queue_seconds) FILTER (WHERE pr.priority >= $3), 0)
FROM job_jct j
CROSS JOIN LATERAL (
    SELECT greatest(j.priority, coalesce(max(p.priority), j.priority)) AS priority FROM pods p WHERE p.job_uid = j.uid
) pr
WHERE j.namespace = $1 AND j.created_at >= $2 AND j.finished_at IS NOT NULL`

// idleSamplesSQL labels the GPU samples of [$1, $2) with the categories of
// the collector's rollups (store.RollupStates): held and active (engine
// activity or utilisation at least $3) is busy, held and below it is
// allocated_idle, free while GPU demand waited is unallocated_waiting (the
// first ceil(pending GPUs) free GPUs by UUID, so one waiting pod does not
// make a hundred free GPUs wasted), otherwise spare. The rollups work per
// minute; a replay at hundreds of times real speed puts hours of trace into
// one minute, so the demo applies the same rules to each scrape round
// ($4 seconds) instead.
const idleSamplesSQL = `
WITH rounds AS (
    SELECT to_timestamp(floor(extract(epoch FROM ts) / $4) * $4) AS round, gpu_uuid,
           bool_or(pod_name <> '') AS held,
           max(greatest(gr_engine_active, gpu_util / 100)) AS activity
    FROM gpu_samples
    WHERE ts >= $1 AND ts < $2
    GROUP BY 1, 2
), demand AS (
    SELECT r.round,
           coalesce(sum(CASE WHEN p.gpu_milli > 0 AND p.gpu_milli < 1000 THEN p.gpu_milli / 1000.0 ELSE p.gpus END), 0) AS pending
    FROM (SELECT DISTINCT round FROM rounds) r
    LEFT JOIN pods p ON p.gpus > 0 AND p.created_at <= r.round
         AND coalesce(p.scheduled_at, p.finished_at, 'infinity') > r.round
    GROUP BY r.round
)
SELECT count(*) FILTER (WHERE state IN ('allocated_idle', 'unallocated_waiting')), count(*)
FROM (
    SELECT CASE
             WHEN r.held AND r.activity >= $3 THEN 'busy'
             WHEN r.held THEN 'allocated_idle'
             WHEN row_number() OVER (PARTITION BY r.round, r.held ORDER BY r.gpu_uuid) <= ceil(d.pending) THEN 'unallocated_waiting'
             ELSE 'spare'
           END AS state
    FROM rounds r JOIN demand d USING (round)
) labelled`

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

	MeanJCTSeconds             float64 `json:"meanJctSeconds"`
	HighPriorityJobs           int     `json:"highPriorityJobs"`
	HighPriorityP95WaitSeconds float64 `json:"highPriorityP95WaitSeconds"`
}

// Summary is what the demo prints at the end.
type Summary struct {
	Trace string  `json:"trace"`
	Speed float64 `json:"speed"`
	// Published: the tuned profile reached the scheduler; Accepted: the
	// tuner's guardrails would have published it on their own.
	Published bool         `json:"published"`
	Accepted  bool         `json:"accepted"`
	Reason    string       `json:"reason"`
	Before    PhaseSummary `json:"before"`
	After     PhaseSummary `json:"after"`
	Dashboard string       `json:"dashboard"`
	// Predicted is what the tuner's held-out replays expected of the
	// published profile (tuner.Report.Predicted: metric and baseline_metric
	// values); nil when nothing was published.
	Predicted map[string]float64 `json:"predicted,omitempty"`
}

// phaseJobs reads how many of a phase's jobs the collector stored and has
// seen finish, and the phase's GPU window.
func phaseJobs(ctx context.Context, pool *pgxpool.Pool, namespace string, began time.Time) (jobs, finished int, from, to time.Time, err error) {
	err = pool.QueryRow(ctx, phaseJobsSQL, namespace, began).Scan(&jobs, &finished, &from, &to)
	if err != nil {
		err = fmt.Errorf("read jobs of %s: %w", namespace, err)
	}
	return jobs, finished, from, to, err
}

// idleSamples counts idle and all GPU samples in [from, to), by scrape round.
func idleSamples(ctx context.Context, pool *pgxpool.Pool, from, to time.Time, threshold, round float64) (idle, total int64, err error) {
	if err := pool.QueryRow(ctx, idleSamplesSQL, from, to, threshold, round).Scan(&idle, &total); err != nil {
		return 0, 0, fmt.Errorf("read GPU samples %s..%s: %w", from.Format(time.TimeOnly), to.Format(time.TimeOnly), err)
	}
	return idle, total, nil
}

// readPhase fills a phase's figures from the database.
func readPhase(ctx context.Context, pool *pgxpool.Pool, p *PhaseSummary, threshold float64) error {
	var err error
	if p.Jobs, _, p.WindowFrom, p.WindowTo, err = phaseJobs(ctx, pool, p.Namespace, p.Began); err != nil {
		return err
	}
	if err := pool.QueryRow(ctx, phaseJCTSQL, p.Namespace, p.Began, HighPriority).
		Scan(&p.FinishedJobs, &p.MeanJCTSeconds, &p.HighPriorityJobs, &p.HighPriorityP95WaitSeconds); err != nil {
		return fmt.Errorf("read JCT of %s: %w", p.Namespace, err)
	}
	if p.IdleGPUSamples, p.GPUSamples, err = idleSamples(ctx, pool, p.WindowFrom, p.WindowTo, threshold, p.RoundSeconds); err != nil {
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
	fmt.Fprintf(tw, "\tbefore: %s\tafter: %s\tchange\tpredicted\n", s.Before.Profile, s.After.Profile)
	b, a := s.Before, s.After
	fmt.Fprintf(tw, "GPU idle share\t%.1f%% of %d samples\t%.1f%% of %d samples\t%+.1f pts\t%s\n",
		100*b.GPUIdleShare, b.GPUSamples, 100*a.GPUIdleShare, a.GPUSamples, 100*(a.GPUIdleShare-b.GPUIdleShare),
		s.predicted("gpu_idle_share", func(before, after float64) string { return fmt.Sprintf("%+.1f pts", 100*(after-before)) }))
	fmt.Fprintf(tw, "mean JCT\t%s\t%s\t%s\t%s\n", s.seconds(b.MeanJCTSeconds), s.seconds(a.MeanJCTSeconds),
		change(b.MeanJCTSeconds, a.MeanJCTSeconds), s.predicted("mean_jct_s", change))
	fmt.Fprintf(tw, "high-priority p95 wait\t%s\t%s\t%s\t%s\n", s.seconds(b.HighPriorityP95WaitSeconds), s.seconds(a.HighPriorityP95WaitSeconds),
		change(b.HighPriorityP95WaitSeconds, a.HighPriorityP95WaitSeconds), s.predicted("p95_high_priority_wait_s", change))
	fmt.Fprintf(tw, "jobs finished (high priority)\t%d/%d (%d)\t%d/%d (%d)\t\t\n", b.FinishedJobs, b.Jobs, b.HighPriorityJobs, a.FinishedJobs, a.Jobs, a.HighPriorityJobs)
	tw.Flush()
	switch {
	case !s.Published:
		fmt.Fprintf(w, "the tuner kept profile %s (%s): both replays ran under it\n", b.Profile, s.Reason)
	case !s.Accepted:
		fmt.Fprintf(w, "the tuned profile was published by -publish=always; the tuner's own verdict: %s\n", s.Reason)
	default:
		fmt.Fprintf(w, "the tuner published its profile: %s\n", s.Reason)
	}
	fmt.Fprintf(w, "both replays: the same %d jobs from %s; dashboard %s\n", b.Jobs, s.Trace, s.Dashboard)
	if s.Predicted != nil {
		fmt.Fprintln(w, "predicted: the tuner's replays of the held-out (later 30%) jobs, current profile against the published one")
	}
}

// predicted formats the tuner's expected change of metric, baseline to
// proposal, on its held-out replays ("" without a prediction).
func (s Summary) predicted(metric string, format func(before, after float64) string) string {
	before, okB := s.Predicted["baseline_"+metric]
	after, okA := s.Predicted[metric]
	if !okB || !okA {
		return ""
	}
	return format(before, after)
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
