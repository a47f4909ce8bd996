package store

import (
	"context"
	"fmt"
	"time"
)

// GPU idle accounting, in two idempotent steps the collector repeats for
// each closed time range (after RollupGPUMinutes):
//   1. RollupDemand records how much GPU demand waited in each minute;
//   2. RollupStates labels every GPU-minute busy / allocated_idle /
//      unallocated_waiting / spare and adds them up per hour and node.

// DefaultIdleThreshold is the engine activity (DCGM_FI_PROF_GR_ENGINE_ACTIVE,
// 0..1) below which a held GPU counts as allocated but idle.
const DefaultIdleThreshold = 0.05

// RollupDemand recomputes gpu_demand_minutes for the minutes in [from, to).
// A pod's demand counts from its creation until it was bound (or ended
// without ever being bound). While its job's Kueue Workload (same namespace
// and name) holds no quota reservation, it counts as waiting for quota, not
// for capacity: the latest QuotaReserved state observed at or before the
// minute is not True, or none was observed yet.
func (s *Store) RollupDemand(ctx context.Context, from, to time.Time) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO gpu_demand_minutes (minute, pending_gpus, pending_pods, pending_quota_gpus, pending_quota_pods)
		SELECT minute,
		       coalesce(sum(gpus) FILTER (WHERE NOT quota_wait), 0),
		       count(uid) FILTER (WHERE NOT quota_wait),
		       coalesce(sum(gpus) FILTER (WHERE quota_wait), 0),
		       count(uid) FILTER (WHERE quota_wait)
		FROM (
		    SELECT m.minute, p.uid,
		           CASE WHEN p.gpu_milli > 0 AND p.gpu_milli < 1000 THEN p.gpu_milli / 1000.0 ELSE p.gpus END AS gpus,
		           w.uid IS NOT NULL AND w.created_at <= m.minute AND coalesce((
		               SELECT c.status = 'True' FROM kueue_workload_conditions c
		               WHERE c.workload_uid = w.uid AND c.type = 'QuotaReserved' AND c.at <= m.minute
		               ORDER BY c.at DESC, c.status DESC LIMIT 1), false) = false AS quota_wait
		    FROM generate_series(date_trunc('minute', $1::timestamptz), $2::timestamptz - interval '1 minute', interval '1 minute') AS m(minute)
		    LEFT JOIN pods p ON p.gpus > 0
		         AND p.created_at <= m.minute
		         AND coalesce(p.scheduled_at, p.finished_at, 'infinity') > m.minute
		    LEFT JOIN jobs j ON j.uid = p.job_uid
		    LEFT JOIN kueue_workloads w ON w.namespace = j.namespace AND w.name = j.name
		) demand
		GROUP BY minute
		ON CONFLICT (minute) DO UPDATE SET pending_gpus = EXCLUDED.pending_gpus, pending_pods = EXCLUDED.pending_pods,
		    pending_quota_gpus = EXCLUDED.pending_quota_gpus, pending_quota_pods = EXCLUDED.pending_quota_pods`,
		from, to)
	if err != nil {
		return fmt.Errorf("roll up GPU demand %s..%s: %w", from.Format(time.RFC3339), to.Format(time.RFC3339), err)
	}
	return nil
}

// QuotaWaitGPUMinutes is the GPU-minutes in [from, to) that were free while
// demand waited for Kueue's quota and no demand waited for them as
// capacity: in each minute, the free GPUs beyond those counted
// unallocated_waiting, up to the GPUs of demand waiting for quota. They are
// part of the spare state: idle by policy, not by shortage.
func (s *Store) QuotaWaitGPUMinutes(ctx context.Context, from, to time.Time) (float64, error) {
	var v float64
	err := s.pool.QueryRow(ctx, `
		SELECT coalesce(sum(least(greatest(f.free - d.pending_gpus, 0), d.pending_quota_gpus)), 0)
		FROM (SELECT minute, sum(compute_share::double precision) AS free
		      FROM gpu_device_minutes WHERE pod_name = '' AND minute >= $1 AND minute < $2
		      GROUP BY minute) f
		JOIN gpu_demand_minutes d USING (minute)`, from, to).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read GPU-minutes free while quota waited %s..%s: %w", from.Format(time.RFC3339), to.Format(time.RFC3339), err)
	}
	return v, nil
}

// shareSlack absorbs the rounding of compute shares stored as real: seven
// 1/7 shares add up to a hair over or under 1, and a free device must not
// flip between waiting and spare on that. It is far below the smallest
// fraction of demand (a thousandth of a GPU).
const shareSlack = 1e-4

// RollupStates recomputes gpu_state_hours for the whole hours touching
// [from, to). Each device-minute (gpu_device_minutes: a whole GPU, or one
// MIG instance) counts by its share of its GPU's compute, so a GPU whose
// seven 1g instances are four busy and three idle adds 4/7 busy and 3/7
// idle GPU-minutes. Within a minute, free devices are ranked by UUID and
// instance, and those starting before pending_gpus GPUs' worth of them count
// as unallocated while demand waited (for whole GPUs, the first
// ceil(pending_gpus)): a single waiting one-GPU pod does not make a hundred
// free GPUs "wasted". A held device is busy when its engine activity (or,
// without profiling metrics, its utilization) reaches threshold.
func (s *Store) RollupStates(ctx context.Context, from, to time.Time, threshold float64) error {
	hourFrom := from.UTC().Truncate(time.Hour)
	hourTo := to.UTC().Add(time.Hour - time.Nanosecond).Truncate(time.Hour)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("roll up GPU states: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `DELETE FROM gpu_state_hours WHERE hour >= $1 AND hour < $2`, hourFrom, hourTo); err != nil {
		return fmt.Errorf("roll up GPU states: clear %s..%s: %w", hourFrom, hourTo, err)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO gpu_state_hours (hour, node, gpu_model, pod_namespace, state, gpu_minutes)
		SELECT date_trunc('hour', minute), node, gpu_model, pod_namespace, state, sum(share)
		FROM (
		    SELECT g.minute, g.node, coalesce(n.gpu_model, gp.model, '') AS gpu_model, g.pod_namespace,
		           g.compute_share::double precision AS share,
		           CASE
		             WHEN g.pod_name <> '' AND greatest(g.gr_engine_active_avg, g.gpu_util_avg / 100) >= $3 THEN 'busy'
		             WHEN g.pod_name <> '' THEN 'allocated_idle'
		             WHEN sum(g.compute_share::double precision) OVER (PARTITION BY g.minute, g.pod_name = ''
		                      ORDER BY g.gpu_uuid, g.gpu_instance ROWS UNBOUNDED PRECEDING)
		                  - g.compute_share + $4 < coalesce(d.pending_gpus, 0) THEN 'unallocated_waiting'
		             ELSE 'spare'
		           END AS state
		    FROM gpu_device_minutes g
		    LEFT JOIN gpu_demand_minutes d ON d.minute = g.minute
		    LEFT JOIN nodes n ON n.name = g.node
		    LEFT JOIN gpus gp ON gp.uuid = g.gpu_uuid
		    WHERE g.minute >= $1 AND g.minute < $2
		) labelled
		GROUP BY 1, 2, 3, 4, 5`, hourFrom, hourTo, threshold, shareSlack); err != nil {
		return fmt.Errorf("roll up GPU states %s..%s: %w", hourFrom, hourTo, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("roll up GPU states: commit: %w", err)
	}
	return nil
}

// IdleBreakdown is GPU time by state over a range, in GPU-minutes rounded
// to whole ones: a MIG instance's minute counts as its share of the GPU, so
// the sums behind them need not be whole (GPUStateMinutes has them exactly).
type IdleBreakdown struct {
	BusyMinutes               int64
	AllocatedIdleMinutes      int64
	UnallocatedWaitingMinutes int64
	SpareMinutes              int64
}

// Total is every GPU-minute accounted for.
func (b IdleBreakdown) Total() int64 {
	return b.BusyMinutes + b.AllocatedIdleMinutes + b.UnallocatedWaitingMinutes + b.SpareMinutes
}

// IdleShare is the share of GPU time that was wasted: held but idle, or
// free while work waited.
func (b IdleBreakdown) IdleShare() float64 {
	if b.Total() == 0 {
		return 0
	}
	return float64(b.AllocatedIdleMinutes+b.UnallocatedWaitingMinutes) / float64(b.Total())
}

// GPUIdleBreakdown adds up gpu_state_hours over the hours in [from, to).
func (s *Store) GPUIdleBreakdown(ctx context.Context, from, to time.Time) (IdleBreakdown, error) {
	var b IdleBreakdown
	err := s.pool.QueryRow(ctx, `
		SELECT round(coalesce(sum(gpu_minutes) FILTER (WHERE state = 'busy'), 0))::bigint,
		       round(coalesce(sum(gpu_minutes) FILTER (WHERE state = 'allocated_idle'), 0))::bigint,
		       round(coalesce(sum(gpu_minutes) FILTER (WHERE state = 'unallocated_waiting'), 0))::bigint,
		       round(coalesce(sum(gpu_minutes) FILTER (WHERE state = 'spare'), 0))::bigint
		FROM gpu_state_hours WHERE hour >= $1 AND hour < $2`, from, to).
		Scan(&b.BusyMinutes, &b.AllocatedIdleMinutes, &b.UnallocatedWaitingMinutes, &b.SpareMinutes)
	if err != nil {
		return b, fmt.Errorf("read GPU idle breakdown: %w", err)
	}
	return b, nil
}

// PodWaitBreakdown returns how many seconds a pod waited for each reason
// category, up to now for a pod still waiting.
func (s *Store) PodWaitBreakdown(ctx context.Context, podUID string) (map[string]float64, error) {
	rows, err := s.pool.Query(ctx, `SELECT category, seconds FROM pod_wait_breakdown WHERE pod_uid = $1`, podUID)
	if err != nil {
		return nil, fmt.Errorf("read wait breakdown of pod %s: %w", podUID, err)
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var category string
		var seconds float64
		if err := rows.Scan(&category, &seconds); err != nil {
			return nil, fmt.Errorf("read wait breakdown of pod %s: %w", podUID, err)
		}
		out[category] = seconds
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read wait breakdown of pod %s: %w", podUID, err)
	}
	return out, nil
}

// JobJCT is one job's completion time split into queueing and running.
type JobJCT struct {
	UID          string
	QueueSeconds float64
	RunSeconds   float64
	JCTSeconds   float64
}

// FinishedJobJCT lists the JCT of jobs that finished in [from, to) after
// running: a job none of whose members was ever bound has none (job_jct).
func (s *Store) FinishedJobJCT(ctx context.Context, from, to time.Time) ([]JobJCT, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT uid, coalesce(queue_seconds, 0), coalesce(run_seconds, 0), jct_seconds FROM job_jct
		WHERE finished_at >= $1 AND finished_at < $2 AND jct_seconds IS NOT NULL ORDER BY finished_at, uid`, from, to)
	if err != nil {
		return nil, fmt.Errorf("read job JCT: %w", err)
	}
	defer rows.Close()
	var out []JobJCT
	for rows.Next() {
		var j JobJCT
		if err := rows.Scan(&j.UID, &j.QueueSeconds, &j.RunSeconds, &j.JCTSeconds); err != nil {
			return nil, fmt.Errorf("read job JCT: %w", err)
		}
		out = append(out, j)
	}
	return out, rows.Err()
}
