package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Queries the collector needs beyond ingest: the idle gauges it exports,
// which errors are worth retrying, and job lifecycle derived from members.

// StateMinutes is one group of gpu_state_hours.
type StateMinutes struct {
	Node      string
	Namespace string
	State     string
	// Minutes are GPU-minutes, MIG instances counted by compute share.
	Minutes float64
}

// GPUStateMinutes adds up GPU-minutes per node, holder namespace and state
// over the hours in [from, to).
func (s *Store) GPUStateMinutes(ctx context.Context, from, to time.Time) ([]StateMinutes, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT node, pod_namespace, state, sum(gpu_minutes) FROM gpu_state_hours
		WHERE hour >= $1 AND hour < $2 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`, from, to)
	if err != nil {
		return nil, fmt.Errorf("read GPU state minutes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StateMinutes, error) {
		var m StateMinutes
		return m, r.Scan(&m.Node, &m.Namespace, &m.State, &m.Minutes)
	})
	if err != nil {
		return nil, fmt.Errorf("read GPU state minutes: %w", err)
	}
	return out, nil
}

// Permanent reports whether err is Postgres refusing the data itself (a
// data exception or integrity violation): sending the same rows again
// cannot succeed. Connection failures and server restarts are not permanent.
func Permanent(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23":
		return true
	}
	return false
}

// DeriveJobs fills the lifecycle of the given jobs from their member pods:
// first member bound, minMember-th member bound (admitted), minMember-th
// member started, all members ended (finished) and the outcome. Times only
// fill in, never move, and a terminal phase sticks, as in UpsertJobs. The
// request shape per member (CPU, memory: the largest member's; GPU models:
// those of a member that names any) comes from the members when they
// carry it; a job whose members carry none keeps what it had.
//
// A job outlives its evicted members (pods.evicted): its controller puts
// new pods in their place, which join the same job (the same gang, or for
// a lone pod the same Job controller UID), so the job is finished only
// when no member is left alive and either
//   - minMember members ran to their end (Succeeded or Failed): finished
//     at the last member's end, Failed if any member failed;
//   - a member was deleted other than by eviction, or the job is a bare
//     pod (its own job: nothing replaces it), once every member was seen;
//   - the gang's group object was deleted (jobs.deleted_at): finished then,
//     or at the last member's end if later.
//
// The last two end as Deleted. First bound, admitted and started are the
// first seen over every run: queueing (job_jct) is the wait for the first
// admission, and time lost to an eviction is run time.
func (s *Store) DeriveJobs(ctx context.Context, jobUIDs []string) error {
	if len(jobUIDs) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `
		WITH m AS (
		    SELECT j.uid AS job_uid,
		           array_agg(p.scheduled_at ORDER BY p.scheduled_at) FILTER (WHERE p.scheduled_at IS NOT NULL) AS bound,
		           array_agg(p.started_at ORDER BY p.started_at) FILTER (WHERE p.started_at IS NOT NULL) AS started,
		           count(p.uid) AS members,
		           count(p.uid) FILTER (WHERE p.phase NOT IN ('Succeeded', 'Failed', 'Deleted')) AS live,
		           count(p.uid) FILTER (WHERE p.phase IN ('Succeeded', 'Failed')) AS completed,
		           count(p.uid) FILTER (WHERE p.phase = 'Failed') AS failed,
		           count(p.uid) FILTER (WHERE p.phase = 'Deleted' AND NOT p.evicted) AS removed,
		           -- Members started and not evicted: an evicted gang waits again.
		           count(p.uid) FILTER (WHERE p.started_at IS NOT NULL AND NOT p.evicted) AS running,
		           coalesce(bool_or(p.uid = p.job_uid), false) AS bare,
		           max(p.finished_at) AS last_end,
		           max(p.priority) AS priority,
		           max(p.gpus) AS gpus,
		           max(p.gpu_milli) AS gpu_milli,
		           max(p.cpu_milli) AS cpu_milli,
		           max(p.memory_mib) AS memory_mib,
		           -- Label values hold no '|', so a list survives the round trip.
		           min(array_to_string(p.gpu_models, '|')) FILTER (WHERE cardinality(p.gpu_models) > 0) AS gpu_models
		    FROM jobs j LEFT JOIN pods p ON p.job_uid = j.uid
		    WHERE j.uid = ANY($1) GROUP BY j.uid
		), e AS (
		    SELECT m.*, j.min_member, j.deleted_at,
		           m.live = 0 AND (m.completed >= j.min_member OR j.deleted_at IS NOT NULL
		               OR m.members >= j.min_member AND (m.removed > 0 OR m.bare)) AS ended
		    FROM m JOIN jobs j ON j.uid = m.job_uid
		)
		UPDATE jobs j SET
		    first_scheduled_at = coalesce(j.first_scheduled_at, e.bound[1]),
		    admitted_at = coalesce(j.admitted_at, e.bound[j.min_member]),
		    started_at = coalesce(j.started_at, e.started[j.min_member]),
		    finished_at = coalesce(j.finished_at, CASE WHEN e.ended THEN
		        CASE WHEN e.completed >= e.min_member OR e.deleted_at IS NULL THEN e.last_end
		             ELSE greatest(e.last_end, e.deleted_at) END END),
		    phase = CASE
		        WHEN j.phase IN ('Succeeded', 'Failed', 'Deleted') THEN j.phase
		        WHEN e.ended THEN
		            CASE WHEN e.completed < e.min_member THEN 'Deleted' WHEN e.failed > 0 THEN 'Failed' ELSE 'Succeeded' END
		        WHEN e.running >= j.min_member THEN 'Running'
		        ELSE 'Pending' END,
		    -- A PodGroup says nothing of priority or GPUs; its members do (pod
		    -- priority and requests are immutable), so they win over whatever a
		    -- group-only write stored.
		    priority = coalesce(e.priority, j.priority),
		    gpus_per_member = CASE WHEN e.gpus > 0 THEN e.gpus ELSE j.gpus_per_member END,
		    gpu_milli_per_member = CASE WHEN e.gpu_milli > 0 THEN e.gpu_milli ELSE j.gpu_milli_per_member END,
		    cpu_milli_per_member = CASE WHEN e.cpu_milli > 0 THEN e.cpu_milli ELSE j.cpu_milli_per_member END,
		    memory_mib_per_member = CASE WHEN e.memory_mib > 0 THEN e.memory_mib ELSE j.memory_mib_per_member END,
		    gpu_models = coalesce(string_to_array(e.gpu_models, '|'), j.gpu_models)
		FROM e WHERE j.uid = e.job_uid`, jobUIDs)
	if err != nil {
		return fmt.Errorf("derive lifecycle of %d jobs: %w", len(jobUIDs), err)
	}
	return nil
}

// PodGPU is one GPU, or one MIG instance of a GPU, a pod held, with its
// activity while the pod held it.
type PodGPU struct {
	GPUUUID string
	// GPUInstance and GPUInstanceProfile name the MIG instance held, ""
	// for a whole GPU; ComputeShare is its share of the GPU's compute, 1
	// for a whole GPU.
	GPUInstance          string
	GPUInstanceProfile   string
	ComputeShare         float64
	Node                 string
	Minutes              int
	GrEngineActiveAvg    float64
	GPUUtilAvg           float64
	FirstMinute, LastMin time.Time
}

// PodGPUs lists the GPUs and MIG instances a pod was seen holding in the
// per-minute rollup, with their activity over those minutes.
func (s *Store) PodGPUs(ctx context.Context, podUID string) ([]PodGPU, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT gpu_uuid, gpu_instance, gpu_instance_profile, compute_share, node, minutes,
		       gr_engine_active_avg, gpu_util_avg, first_minute, last_minute
		FROM pod_gpu_activity WHERE pod_uid = $1 ORDER BY gpu_uuid, gpu_instance`, podUID)
	if err != nil {
		return nil, fmt.Errorf("read GPUs of pod %s: %w", podUID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PodGPU, error) {
		var g PodGPU
		return g, r.Scan(&g.GPUUUID, &g.GPUInstance, &g.GPUInstanceProfile, &g.ComputeShare, &g.Node, &g.Minutes, &g.GrEngineActiveAvg, &g.GPUUtilAvg, &g.FirstMinute, &g.LastMin)
	})
	if err != nil {
		return nil, fmt.Errorf("read GPUs of pod %s: %w", podUID, err)
	}
	return out, nil
}
