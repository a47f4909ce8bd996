package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	schedloop "github.com/schedloop/schedloop"
)

// OpenJob is a job that has not finished: waiting, or running on Nodes
// (one entry per bound member that has not ended, in pod-name order).
type OpenJob struct {
	schedloop.Job
	Nodes []string
}

// OpenJobs reads every job created since since that has not finished or
// been deleted, with the nodes its live members are bound to: the state a
// wait estimate starts from. A gang whose members are bound but not all
// of them is still waiting (its Admitted is unset).
func (s *Store) OpenJobs(ctx context.Context, since time.Time) ([]OpenJob, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT j.uid, j.namespace, j.name, j.kind, j.queue, j.priority, j.min_member, j.gpus_per_member, j.gpu_milli_per_member,
		       j.created_at, j.first_scheduled_at, j.admitted_at, j.started_at, j.phase,
		       j.cpu_milli_per_member, j.memory_mib_per_member, j.gpu_models,
		       coalesce((SELECT array_agg(p.node ORDER BY p.name) FROM pods p
		                 WHERE p.job_uid = j.uid AND p.node <> '' AND p.finished_at IS NULL
		                   AND p.phase NOT IN ('Succeeded', 'Failed', 'Deleted')), '{}')
		FROM jobs j
		WHERE j.finished_at IS NULL AND j.phase NOT IN ('Succeeded', 'Failed', 'Deleted') AND j.created_at >= $1
		ORDER BY j.created_at, j.uid`, since)
	if err != nil {
		return nil, fmt.Errorf("read open jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (OpenJob, error) {
		var j OpenJob
		var kind, phase string
		var first, admitted, started pgtype.Timestamptz
		err := r.Scan(&j.UID, &j.Namespace, &j.Name, &kind, &j.Queue, &j.Priority, &j.MinMember, &j.GPUsPerMember,
			&j.GPUMilliPerMember, &j.Created, &first, &admitted, &started, &phase,
			&j.CPUMilliPerMember, &j.MemoryMiBPerMember, &j.GPUModels, &j.Nodes)
		j.Kind, j.Phase = schedloop.JobKind(kind), schedloop.Phase(phase)
		j.MinMember = gangMembers(j.MinMember)
		j.GPUModels = nilIfEmpty(j.GPUModels)
		j.FirstScheduled, j.Admitted, j.Started = fromNullTime(first), fromNullTime(admitted), fromNullTime(started)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("read open jobs: %w", err)
	}
	return jobs, nil
}
