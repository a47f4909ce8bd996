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
func (s *Store) DeriveJobs(ctx context.Context, jobUIDs []string) error {
	if len(jobUIDs) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `
		WITH m AS (
		    SELECT job_uid,
		           array_agg(scheduled_at ORDER BY scheduled_at) FILTER (WHERE scheduled_at IS NOT NULL) AS bound,
		           array_agg(started_at ORDER BY started_at) FILTER (WHERE started_at IS NOT NULL) AS started,
		           count(*) AS members,
		           count(*) FILTER (WHERE phase IN ('Succeeded', 'Failed', 'Deleted')) AS ended,
		           count(*) FILTER (WHERE phase = 'Failed') AS failed,
		           count(*) FILTER (WHERE phase = 'Deleted') AS deleted,
		           max(finished_at) AS last_end,
		           max(priority) AS priority,
		           max(gpus) AS gpus,
		           max(gpu_milli) AS gpu_milli,
		           max(cpu_milli) AS cpu_milli,
		           max(memory_mib) AS memory_mib,
		           -- Label values hold no '|', so a list survives the round trip.
		           min(array_to_string(gpu_models, '|')) FILTER (WHERE cardinality(gpu_models) > 0) AS gpu_models
		    FROM pods WHERE job_uid = ANY($1) GROUP BY job_uid
		)
		UPDATE jobs j SET
		    first_scheduled_at = coalesce(j.first_scheduled_at, m.bound[1]),
		    admitted_at = coalesce(j.admitted_at, m.bound[j.min_member]),
		    started_at = coalesce(j.started_at, m.started[j.min_member]),
		    finished_at = coalesce(j.finished_at,
		        CASE WHEN m.ended = m.members AND m.members >= j.min_member THEN m.last_end END),
		    phase = CASE
		        WHEN j.phase IN ('Succeeded', 'Failed', 'Deleted') THEN j.phase
		        WHEN m.ended = m.members AND m.members >= j.min_member THEN
		            CASE WHEN m.failed > 0 THEN 'Failed' WHEN m.deleted > 0 THEN 'Deleted' ELSE 'Succeeded' END
		        WHEN cardinality(m.started) >= j.min_member THEN 'Running'
		        ELSE 'Pending' END,
		    -- A PodGroup says nothing of priority or GPUs; its members do (pod
		    -- priority and requests are immutable), so they win over whatever a
		    -- group-only write stored.
		    priority = m.priority,
		    gpus_per_member = CASE WHEN m.gpus > 0 THEN m.gpus ELSE j.gpus_per_member END,
		    gpu_milli_per_member = CASE WHEN m.gpu_milli > 0 THEN m.gpu_milli ELSE j.gpu_milli_per_member END,
		    cpu_milli_per_member = CASE WHEN m.cpu_milli > 0 THEN m.cpu_milli ELSE j.cpu_milli_per_member END,
		    memory_mib_per_member = CASE WHEN m.memory_mib > 0 THEN m.memory_mib ELSE j.memory_mib_per_member END,
		    gpu_models = coalesce(string_to_array(m.gpu_models, '|'), j.gpu_models)
		FROM m WHERE j.uid = m.job_uid`, jobUIDs)
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
