package store

import (
	"context"
	"fmt"
	"time"
)

// The read-back of one replayed workload: its jobs are those created in one
// namespace since a start time, and its GPU window is the span from its
// first job's creation to its last job's end. The demo reads both of its
// replays this way.

// JobSpan is how many jobs of a namespace the collector stored since a
// start, how many it has seen finish, and the span they cover.
type JobSpan struct {
	Jobs, Finished int
	// From is the first job's creation and To the last job's end; both are
	// the start asked for while no job (or no finished job) is stored.
	From, To time.Time
}

// NamespaceJobSpan reads the JobSpan of namespace's jobs created at or
// after since.
func (s *Store) NamespaceJobSpan(ctx context.Context, namespace string, since time.Time) (JobSpan, error) {
	var js JobSpan
	err := s.pool.QueryRow(ctx, `
		SELECT count(*), count(finished_at), coalesce(min(created_at), $2), coalesce(max(finished_at), $2)
		FROM jobs WHERE namespace = $1 AND created_at >= $2`, namespace, since).Scan(&js.Jobs, &js.Finished, &js.From, &js.To)
	if err != nil {
		return JobSpan{}, fmt.Errorf("read jobs of %s: %w", namespace, err)
	}
	return js, nil
}

// JCTSummary is the JCT of a namespace's finished jobs, from the job_jct
// view (JCT = queueing + running).
type JCTSummary struct {
	Finished         int
	MeanJCTSeconds   float64
	MeanQueueSeconds float64
	// P95JCTSeconds is the nearest-rank 95th percentile of JCT, as the
	// simulator's metrics take it.
	P95JCTSeconds float64
	// HighPriorityJobs counts the finished jobs at or above the high
	// priority asked for; HighPriorityP95WaitSeconds is the nearest-rank
	// 95th percentile of their queueing (0 without any).
	HighPriorityJobs           int
	HighPriorityP95WaitSeconds float64
}

// QueueShare is mean queueing over mean JCT (0 without finished jobs).
func (j JCTSummary) QueueShare() float64 {
	if j.MeanJCTSeconds <= 0 {
		return 0
	}
	return j.MeanQueueSeconds / j.MeanJCTSeconds
}

// NamespaceJCT summarises the JCT of namespace's jobs created at or after
// since that finished after running (job_jct: a job none of whose members
// was ever bound has no JCT, and a job whose members were evicted finishes
// when a later run ends; queueing is the wait for its first admission).
// A job's priority is the highest of its row and its
// pods' (the job row can miss the priority its pods were admitted with).
func (s *Store) NamespaceJCT(ctx context.Context, namespace string, since time.Time, highPriority int32) (JCTSummary, error) {
	var j JCTSummary
	err := s.pool.QueryRow(ctx, `
		SELECT count(*),
		       coalesce(avg(j.jct_seconds), 0),
		       coalesce(avg(j.queue_seconds), 0),
		       coalesce(percentile_disc(0.95) WITHIN GROUP (ORDER BY j.jct_seconds), 0),
		       count(*) FILTER (WHERE pr.priority >= $3),
		       coalesce(percentile_disc(0.95) WITHIN GROUP (ORDER BY j.queue_seconds) FILTER (WHERE pr.priority >= $3), 0)
		FROM job_jct j
		CROSS JOIN LATERAL (
		    SELECT greatest(j.priority, coalesce(max(p.priority), j.priority)) AS priority FROM pods p WHERE p.job_uid = j.uid
		) pr
		WHERE j.namespace = $1 AND j.created_at >= $2 AND j.jct_seconds IS NOT NULL`, namespace, since, highPriority).
		Scan(&j.Finished, &j.MeanJCTSeconds, &j.MeanQueueSeconds, &j.P95JCTSeconds, &j.HighPriorityJobs, &j.HighPriorityP95WaitSeconds)
	if err != nil {
		return JCTSummary{}, fmt.Errorf("read JCT of %s: %w", namespace, err)
	}
	return j, nil
}

// IdleSamplesByRound counts the GPU samples of [from, to), grouped by scrape
// round of length round, that are idle by the categories of the rollups
// (RollupStates): held and active (engine activity or utilisation at least
// threshold) is busy, held and below it is allocated_idle, free while GPU
// demand waited is unallocated_waiting (the first ceil(pending GPUs) free
// GPUs by UUID, so one waiting pod does not make a hundred free GPUs
// wasted), otherwise spare. idle counts allocated_idle and
// unallocated_waiting; total counts every (GPU, round). The rollups work per
// minute; a replay at hundreds of times real speed puts hours into one
// minute, so this applies the same rules per scrape round instead.
func (s *Store) IdleSamplesByRound(ctx context.Context, from, to time.Time, threshold float64, round time.Duration) (idle, total int64, err error) {
	if round <= 0 {
		return 0, 0, fmt.Errorf("read GPU samples: round %v must be positive", round)
	}
	err = s.pool.QueryRow(ctx, `
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
		) labelled`, from, to, threshold, round.Seconds()).Scan(&idle, &total)
	if err != nil {
		return 0, 0, fmt.Errorf("read GPU samples %s..%s: %w", from.Format(time.TimeOnly), to.Format(time.TimeOnly), err)
	}
	return idle, total, nil
}
