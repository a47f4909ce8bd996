package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/schedloop/schedloop"
)

// A pod is evicted once; a repeated observation of its Event (a re-list,
// a count going up) keeps the first time and the recorded cause.
const upsertPreemptionSQL = `
INSERT INTO preemptions (victim_uid, namespace, victim_pod, victim_job, preemptor, preemptor_priority, node, gpu_hours, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (victim_uid) DO UPDATE SET at = least(preemptions.at, EXCLUDED.at)`

// UpsertPreemptions stores evictions with their causes.
func (s *Store) UpsertPreemptions(ctx context.Context, ps []schedloop.Preemption) error {
	b := &pgx.Batch{}
	for _, p := range ps {
		if p.VictimUID == "" {
			return fmt.Errorf("store preemption of pod %s/%s: victim uid is empty", p.Namespace, p.VictimPod)
		}
		b.Queue(upsertPreemptionSQL, p.VictimUID, p.Namespace, p.VictimPod, p.VictimJob, p.Preemptor,
			p.PreemptorPriority, p.Node, p.GPUHours, p.At)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("store %d preemptions: %w", len(ps), err)
	}
	return nil
}

// Preemptions returns, in time order, the evictions of the pods victimUIDs
// and of the jobs victimJobs (namespace/name), and those made for the
// preemptors (namespace/name).
func (s *Store) Preemptions(ctx context.Context, victimUIDs, victimJobs, preemptors []string) ([]schedloop.Preemption, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT victim_uid, namespace, victim_pod, victim_job, preemptor, preemptor_priority, node, gpu_hours, at
		FROM preemptions
		WHERE victim_uid = ANY($1) OR victim_job = ANY($2) OR preemptor = ANY($3)
		ORDER BY at, victim_uid`, orEmptyStrings(victimUIDs), orEmptyStrings(victimJobs), orEmptyStrings(preemptors))
	if err != nil {
		return nil, fmt.Errorf("read preemptions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.Preemption, error) {
		var p schedloop.Preemption
		err := r.Scan(&p.VictimUID, &p.Namespace, &p.VictimPod, &p.VictimJob, &p.Preemptor, &p.PreemptorPriority,
			&p.Node, &p.GPUHours, &p.At)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("read preemptions: %w", err)
	}
	return out, nil
}

func orEmptyStrings(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}
