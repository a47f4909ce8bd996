package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// QueuedJob is a job waiting to start (not admitted, not started, not
// ended) with the queue it waits in. Queue is the Kueue ClusterQueue when
// the job has a Workload (same namespace and name) whose ClusterQueue is
// known: the one it was last admitted to, else the one another Workload of
// its LocalQueue was admitted to. A Workload whose ClusterQueue is not
// known waits in "namespace/local-queue" (QueueKind "local-queue"); a job
// without a Workload in its queue label (QueueKind "label", "" when
// unlabelled).
type QueuedJob struct {
	UID, Namespace, Name string
	Queue, QueueKind     string
	Gang                 bool
	Priority             int32
	Members              int
	// GPUs the whole job asks for; a shared GPU counts by its share.
	GPUs    float64
	Created time.Time
	// QuotaWait: the job's Workload holds no quota reservation now (its
	// latest QuotaReserved state is not True, or none was seen).
	QuotaWait bool
}

// ClusterQueueUse is the GPUs held by the admitted, unfinished Workloads of
// one ClusterQueue (those whose latest QuotaReserved state is True).
type ClusterQueueUse struct {
	ClusterQueue string
	Workloads    int
	GPUs         float64
}

const jobGPUsSQL = `j.min_member * CASE WHEN j.gpu_milli_per_member > 0 AND j.gpu_milli_per_member < 1000
	THEN j.gpu_milli_per_member / 1000.0 ELSE j.gpus_per_member::numeric END`

const workloadReservedSQL = `coalesce((SELECT c.status = 'True' FROM kueue_workload_conditions c
	WHERE c.workload_uid = w.uid AND c.type = 'QuotaReserved'
	ORDER BY c.at DESC, c.status DESC LIMIT 1), false)`

// QueuedJobs reads every job waiting now, by creation; the scheduler's
// order within each queue is the caller's (scoring.CompareOrder).
func (s *Store) QueuedJobs(ctx context.Context) ([]QueuedJob, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT j.uid, j.namespace, j.name, j.kind = 'gang', j.priority, j.min_member, (`+jobGPUsSQL+`)::float8, j.created_at,
		       j.queue, w.uid IS NOT NULL,
		       coalesce(nullif(w.cluster_queue, ''), (SELECT o.cluster_queue FROM kueue_workloads o
		           WHERE o.namespace = w.namespace AND o.local_queue = w.local_queue AND o.cluster_queue <> ''
		           ORDER BY o.created_at DESC, o.uid LIMIT 1), ''),
		       coalesce(w.local_queue, ''),
		       w.uid IS NOT NULL AND NOT `+workloadReservedSQL+`
		FROM jobs j
		LEFT JOIN kueue_workloads w ON w.namespace = j.namespace AND w.name = j.name
		WHERE j.finished_at IS NULL AND j.phase NOT IN ('Succeeded', 'Failed', 'Deleted')
		  AND j.admitted_at IS NULL AND j.started_at IS NULL
		ORDER BY j.created_at, j.uid`)
	if err != nil {
		return nil, fmt.Errorf("read queued jobs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueuedJob, error) {
		var q QueuedJob
		var label, cq, lq string
		var kueue bool
		err := r.Scan(&q.UID, &q.Namespace, &q.Name, &q.Gang, &q.Priority, &q.Members, &q.GPUs, &q.Created,
			&label, &kueue, &cq, &lq, &q.QuotaWait)
		q.Members = gangMembers(q.Members)
		switch {
		case kueue && cq != "":
			q.Queue, q.QueueKind = cq, "cluster-queue"
		case kueue:
			q.Queue, q.QueueKind = q.Namespace+"/"+lq, "local-queue"
		default:
			q.Queue, q.QueueKind = label, "label"
		}
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("read queued jobs: %w", err)
	}
	return out, nil
}

// ClusterQueueUsage reads, per ClusterQueue, the GPUs its admitted
// Workloads hold now (their jobs' asks; a Workload whose job is not stored
// counts as a Workload without GPUs), by ClusterQueue name.
func (s *Store) ClusterQueueUsage(ctx context.Context) ([]ClusterQueueUse, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT w.cluster_queue, count(*), coalesce(sum(`+jobGPUsSQL+`), 0)::float8
		FROM kueue_workloads w
		LEFT JOIN jobs j ON j.namespace = w.namespace AND j.name = w.name
		WHERE w.cluster_queue <> '' AND `+workloadReservedSQL+`
		  AND NOT EXISTS (SELECT 1 FROM kueue_workload_conditions f
		                  WHERE f.workload_uid = w.uid AND f.type = 'Finished' AND f.status = 'True')
		  AND (j.uid IS NULL OR (j.finished_at IS NULL AND j.phase NOT IN ('Succeeded', 'Failed', 'Deleted')))
		GROUP BY w.cluster_queue ORDER BY w.cluster_queue`)
	if err != nil {
		return nil, fmt.Errorf("read cluster queue usage: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClusterQueueUse, error) {
		var u ClusterQueueUse
		return u, r.Scan(&u.ClusterQueue, &u.Workloads, &u.GPUs)
	})
	if err != nil {
		return nil, fmt.Errorf("read cluster queue usage: %w", err)
	}
	return out, nil
}
