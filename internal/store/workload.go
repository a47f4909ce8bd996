package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/schedloop/schedloop"
)

// ErrNotFound is returned by single-row reads that match nothing.
var ErrNotFound = errors.New("not found")

// Lifecycle timestamps only move forward in knowledge: an upsert never
// erases a time already recorded (a re-list after a restart sees less history
// than the first watch did), and a terminal phase is never overwritten by an
// earlier one arriving late.
const upsertJobSQL = `
INSERT INTO jobs (uid, namespace, name, kind, queue, priority, min_member, gpus_per_member, gpu_milli_per_member,
    created_at, first_scheduled_at, admitted_at, started_at, finished_at, phase,
    cpu_milli_per_member, memory_mib_per_member, gpu_models, deleted_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
ON CONFLICT (uid) DO UPDATE SET
    namespace = EXCLUDED.namespace, name = EXCLUDED.name, kind = EXCLUDED.kind, queue = EXCLUDED.queue,
    priority = EXCLUDED.priority, min_member = EXCLUDED.min_member,
    gpus_per_member = EXCLUDED.gpus_per_member, gpu_milli_per_member = EXCLUDED.gpu_milli_per_member,
    cpu_milli_per_member = CASE WHEN EXCLUDED.cpu_milli_per_member > 0
        THEN EXCLUDED.cpu_milli_per_member ELSE jobs.cpu_milli_per_member END,
    memory_mib_per_member = CASE WHEN EXCLUDED.memory_mib_per_member > 0
        THEN EXCLUDED.memory_mib_per_member ELSE jobs.memory_mib_per_member END,
    gpu_models = CASE WHEN cardinality(EXCLUDED.gpu_models) > 0 THEN EXCLUDED.gpu_models ELSE jobs.gpu_models END,
    created_at = least(jobs.created_at, EXCLUDED.created_at),
    first_scheduled_at = coalesce(jobs.first_scheduled_at, EXCLUDED.first_scheduled_at),
    admitted_at = coalesce(jobs.admitted_at, EXCLUDED.admitted_at),
    started_at = coalesce(jobs.started_at, EXCLUDED.started_at),
    finished_at = coalesce(jobs.finished_at, EXCLUDED.finished_at),
    deleted_at = coalesce(jobs.deleted_at, EXCLUDED.deleted_at),
    phase = CASE WHEN jobs.phase IN ('Succeeded', 'Failed', 'Deleted') THEN jobs.phase ELSE EXCLUDED.phase END`

// UpsertJobs records jobs; see upsertJobSQL for how repeated observations
// merge. A job's request shape (CPU, memory, GPU models) is only replaced by
// a known one: a PodGroup says nothing about it, its members do (DeriveJobs).
func (s *Store) UpsertJobs(ctx context.Context, jobs []schedloop.Job) error {
	b := &pgx.Batch{}
	for _, j := range jobs {
		if j.Created.IsZero() {
			return fmt.Errorf("upsert job %s/%s (uid %s): created time is missing", j.Namespace, j.Name, j.UID)
		}
		b.Queue(upsertJobSQL, j.UID, j.Namespace, j.Name, string(j.Kind), j.Queue, j.Priority, gangMembers(j.MinMember),
			j.GPUsPerMember, j.GPUMilliPerMember, j.Created, nullTime(j.FirstScheduled), nullTime(j.Admitted),
			nullTime(j.Started), nullTime(j.Finished), phaseOrPending(j.Phase), j.CPUMilliPerMember, j.MemoryMiBPerMember,
			textArray(j.GPUModels), nullTime(j.Deleted))
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("upsert %d jobs: %w", len(jobs), err)
	}
	return nil
}

// textArray stores a nil list as an empty array (the columns are NOT NULL).
func textArray(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

// nilIfEmpty reads an empty array back as nil, as it was written.
func nilIfEmpty(v []string) []string {
	if len(v) == 0 {
		return nil
	}
	return v
}

func phaseOrPending(p schedloop.Phase) string {
	if p == "" {
		return string(schedloop.PhasePending)
	}
	return string(p)
}

// GetJob reads one job by UID.
func (s *Store) GetJob(ctx context.Context, uid string) (schedloop.Job, error) {
	var j schedloop.Job
	var kind, phase string
	var first, admitted, started, finished, deleted pgtype.Timestamptz
	err := s.pool.QueryRow(ctx, `
		SELECT uid, namespace, name, kind, queue, priority, min_member, gpus_per_member, gpu_milli_per_member,
		       created_at, first_scheduled_at, admitted_at, started_at, finished_at, phase,
		       cpu_milli_per_member, memory_mib_per_member, gpu_models, deleted_at
		FROM jobs WHERE uid = $1`, uid).Scan(&j.UID, &j.Namespace, &j.Name, &kind, &j.Queue, &j.Priority,
		&j.MinMember, &j.GPUsPerMember, &j.GPUMilliPerMember, &j.Created, &first, &admitted, &started, &finished, &phase,
		&j.CPUMilliPerMember, &j.MemoryMiBPerMember, &j.GPUModels, &deleted)
	if errors.Is(err, pgx.ErrNoRows) {
		return j, fmt.Errorf("job %s: %w", uid, ErrNotFound)
	}
	if err != nil {
		return j, fmt.Errorf("read job %s: %w", uid, err)
	}
	j.Kind, j.Phase = schedloop.JobKind(kind), schedloop.Phase(phase)
	j.FirstScheduled, j.Admitted, j.Started, j.Finished =
		fromNullTime(first), fromNullTime(admitted), fromNullTime(started), fromNullTime(finished)
	j.Deleted = fromNullTime(deleted)
	j.GPUModels = nilIfEmpty(j.GPUModels)
	return j, nil
}

const upsertPodSQL = `
INSERT INTO pods (uid, namespace, name, job_uid, queue, priority, scheduler_name, gpus, gpu_milli, node, gpu_uuids,
    created_at, scheduled_at, started_at, finished_at, phase, cpu_milli, memory_mib, gpu_models, evicted)
VALUES ($1, $2, $3, nullif($4, ''), $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)
ON CONFLICT (uid) DO UPDATE SET
    namespace = EXCLUDED.namespace, name = EXCLUDED.name,
    job_uid = coalesce(EXCLUDED.job_uid, pods.job_uid),
    queue = EXCLUDED.queue, priority = EXCLUDED.priority, scheduler_name = EXCLUDED.scheduler_name,
    gpus = EXCLUDED.gpus, gpu_milli = EXCLUDED.gpu_milli,
    cpu_milli = EXCLUDED.cpu_milli, memory_mib = EXCLUDED.memory_mib, gpu_models = EXCLUDED.gpu_models,
    node = CASE WHEN EXCLUDED.node <> '' THEN EXCLUDED.node ELSE pods.node END,
    gpu_uuids = CASE WHEN cardinality(EXCLUDED.gpu_uuids) > 0 THEN EXCLUDED.gpu_uuids ELSE pods.gpu_uuids END,
    created_at = least(pods.created_at, EXCLUDED.created_at),
    scheduled_at = coalesce(pods.scheduled_at, EXCLUDED.scheduled_at),
    started_at = coalesce(pods.started_at, EXCLUDED.started_at),
    finished_at = coalesce(pods.finished_at, EXCLUDED.finished_at),
    evicted = pods.evicted OR EXCLUDED.evicted,
    phase = CASE WHEN pods.phase IN ('Succeeded', 'Failed', 'Deleted') THEN pods.phase ELSE EXCLUDED.phase END`

// UpsertPods records pods with the same merge rules as UpsertJobs. A pod may
// name a job that is not stored yet: informers do not order pods and PodGroups.
func (s *Store) UpsertPods(ctx context.Context, pods []schedloop.Pod) error {
	b := &pgx.Batch{}
	for _, p := range pods {
		if p.Created.IsZero() {
			return fmt.Errorf("upsert pod %s/%s (uid %s): created time is missing", p.Namespace, p.Name, p.UID)
		}
		uuids := p.GPUUUIDs
		if uuids == nil {
			uuids = []string{}
		}
		b.Queue(upsertPodSQL, p.UID, p.Namespace, p.Name, p.JobUID, p.Queue, p.Priority, p.SchedulerName, p.GPUs,
			p.GPUMilli, p.Node, uuids, p.Created, nullTime(p.Scheduled), nullTime(p.Started), nullTime(p.Finished),
			phaseOrPending(p.Phase), p.CPUMilli, p.MemoryMiB, textArray(p.GPUModels), p.Evicted)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("upsert %d pods: %w", len(pods), err)
	}
	return nil
}

// GetPod reads one pod by UID.
func (s *Store) GetPod(ctx context.Context, uid string) (schedloop.Pod, error) {
	var p schedloop.Pod
	var phase string
	var jobUID pgtype.Text
	var scheduled, started, finished pgtype.Timestamptz
	err := s.pool.QueryRow(ctx, `
		SELECT uid, namespace, name, job_uid, queue, priority, scheduler_name, gpus, gpu_milli, node, gpu_uuids,
		       created_at, scheduled_at, started_at, finished_at, phase, cpu_milli, memory_mib, gpu_models, evicted
		FROM pods WHERE uid = $1`, uid).Scan(&p.UID, &p.Namespace, &p.Name, &jobUID, &p.Queue, &p.Priority,
		&p.SchedulerName, &p.GPUs, &p.GPUMilli, &p.Node, &p.GPUUUIDs, &p.Created, &scheduled, &started, &finished, &phase,
		&p.CPUMilli, &p.MemoryMiB, &p.GPUModels, &p.Evicted)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, fmt.Errorf("pod %s: %w", uid, ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("read pod %s: %w", uid, err)
	}
	p.JobUID, p.Phase = jobUID.String, schedloop.Phase(phase)
	p.GPUModels = nilIfEmpty(p.GPUModels)
	p.Scheduled, p.Started, p.Finished = fromNullTime(scheduled), fromNullTime(started), fromNullTime(finished)
	return p, nil
}
