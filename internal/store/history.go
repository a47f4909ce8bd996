package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/schedloop/schedloop"
)

// The tuner's reads: jobs as a workload to replay, and profiles by name.

// JobHistory returns the jobs created in [from, to) that ran (were admitted
// or started), oldest first. A job still running at to is returned with
// Finished zero; the caller decides how to treat its open run time.
func (s *Store) JobHistory(ctx context.Context, from, to time.Time) ([]schedloop.Job, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT uid, namespace, name, kind, queue, priority, min_member, gpus_per_member, gpu_milli_per_member,
		       created_at, first_scheduled_at, admitted_at, started_at, finished_at, phase,
		       cpu_milli_per_member, memory_mib_per_member, gpu_models,
		       (SELECT (array_agg(p.scheduled_at ORDER BY p.scheduled_at))[greatest(jobs.min_member, 1)]
		        FROM pods p WHERE p.job_uid = jobs.uid AND NOT p.evicted AND p.scheduled_at IS NOT NULL) AS last_run_began
		FROM jobs
		WHERE created_at >= $1 AND created_at < $2
		  AND coalesce(admitted_at, started_at, first_scheduled_at) IS NOT NULL
		ORDER BY created_at, uid`, from, to)
	if err != nil {
		return nil, fmt.Errorf("read job history: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.Job, error) {
		var j schedloop.Job
		var kind, phase string
		var first, admitted, started, finished, lastRun pgtype.Timestamptz
		err := r.Scan(&j.UID, &j.Namespace, &j.Name, &kind, &j.Queue, &j.Priority, &j.MinMember, &j.GPUsPerMember,
			&j.GPUMilliPerMember, &j.Created, &first, &admitted, &started, &finished, &phase,
			&j.CPUMilliPerMember, &j.MemoryMiBPerMember, &j.GPUModels, &lastRun)
		j.LastRunBegan = fromNullTime(lastRun)
		j.Kind, j.Phase = schedloop.JobKind(kind), schedloop.Phase(phase)
		j.MinMember = gangMembers(j.MinMember)
		j.GPUModels = nilIfEmpty(j.GPUModels)
		j.FirstScheduled, j.Admitted, j.Started, j.Finished =
			fromNullTime(first), fromNullTime(admitted), fromNullTime(started), fromNullTime(finished)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("read job history: %w", err)
	}
	return jobs, nil
}

// GetProfileByName reads a profile by its unique name.
func (s *Store) GetProfileByName(ctx context.Context, name string) (schedloop.Profile, error) {
	p, err := scanProfile(s.pool.QueryRow(ctx, `SELECT `+profileColumns+` FROM profiles WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, fmt.Errorf("profile %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("read profile %q: %w", name, err)
	}
	return p, nil
}

// AppliedProfile reads the profile now applied; ErrNotFound when none is.
func (s *Store) AppliedProfile(ctx context.Context) (schedloop.Profile, error) {
	p, err := scanProfile(s.pool.QueryRow(ctx, `SELECT `+profileColumns+` FROM profiles
		WHERE status = 'applied' ORDER BY applied_at DESC NULLS LAST, id DESC LIMIT 1`))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, fmt.Errorf("applied profile: %w", ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("read applied profile: %w", err)
	}
	return p, nil
}
