package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/schedloop/schedloop"
)

// A workload's queue, admission and flavours are its latest; its creation
// time is its first.
const upsertKueueWorkloadSQL = `
INSERT INTO kueue_workloads (uid, namespace, name, local_queue, cluster_queue, flavors, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (uid) DO UPDATE SET
    local_queue = EXCLUDED.local_queue,
    cluster_queue = CASE WHEN EXCLUDED.cluster_queue = '' THEN kueue_workloads.cluster_queue ELSE EXCLUDED.cluster_queue END,
    flavors = CASE WHEN EXCLUDED.flavors = '{}'::jsonb THEN kueue_workloads.flavors ELSE EXCLUDED.flavors END,
    created_at = least(kueue_workloads.created_at, EXCLUDED.created_at)`

// A condition state seen again (a re-list, an unrelated status write) adds
// nothing; its message is the latest seen.
const upsertKueueConditionSQL = `
INSERT INTO kueue_workload_conditions (workload_uid, type, status, reason, message, category, at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (workload_uid, type, at, status, reason) DO UPDATE SET message = EXCLUDED.message, category = EXCLUDED.category`

// UpsertKueueWorkloads stores Workloads and adds their conditions to each
// one's history. A workload keeps the cluster queue and flavours of its
// last admission while it waits again after an eviction.
func (s *Store) UpsertKueueWorkloads(ctx context.Context, ws []schedloop.KueueWorkload) error {
	b := &pgx.Batch{}
	for _, w := range ws {
		if w.UID == "" {
			return fmt.Errorf("store kueue workload %s/%s: uid is empty", w.Namespace, w.Name)
		}
		flavors := w.Flavors
		if flavors == nil {
			flavors = map[string]string{}
		}
		b.Queue(upsertKueueWorkloadSQL, w.UID, w.Namespace, w.Name, w.LocalQueue, w.ClusterQueue, flavors, w.CreatedAt)
		for _, c := range w.Conditions {
			if c.Type == "" || c.At.IsZero() {
				return fmt.Errorf("store kueue workload %s/%s: condition %q at %v: type and time are required", w.Namespace, w.Name, c.Type, c.At)
			}
			b.Queue(upsertKueueConditionSQL, w.UID, c.Type, c.Status, c.Reason, c.Message, string(c.Category), c.At)
		}
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("store %d kueue workloads: %w", len(ws), err)
	}
	return nil
}

// KueueWorkloads returns the stored workloads of namespace (all namespaces
// when empty) by creation, each with its condition history in time order.
func (s *Store) KueueWorkloads(ctx context.Context, namespace string) ([]schedloop.KueueWorkload, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT uid, namespace, name, local_queue, cluster_queue, flavors, created_at
		FROM kueue_workloads WHERE $1 = '' OR namespace = $1
		ORDER BY created_at, uid`, namespace)
	if err != nil {
		return nil, fmt.Errorf("read kueue workloads: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.KueueWorkload, error) {
		var w schedloop.KueueWorkload
		err := r.Scan(&w.UID, &w.Namespace, &w.Name, &w.LocalQueue, &w.ClusterQueue, &w.Flavors, &w.CreatedAt)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("read kueue workloads: %w", err)
	}
	index := map[string]int{}
	uids := make([]string, len(out))
	for i, w := range out {
		index[w.UID], uids[i] = i, w.UID
	}
	rows, err = s.pool.Query(ctx, `
		SELECT workload_uid, type, status, reason, message, category, at
		FROM kueue_workload_conditions WHERE workload_uid = ANY($1)
		ORDER BY at, type, status`, uids)
	if err != nil {
		return nil, fmt.Errorf("read kueue workload conditions: %w", err)
	}
	var uid string
	var c schedloop.KueueCondition
	_, err = pgx.ForEachRow(rows, []any{&uid, &c.Type, &c.Status, &c.Reason, &c.Message, &c.Category, &c.At}, func() error {
		w := &out[index[uid]]
		w.Conditions = append(w.Conditions, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read kueue workload conditions: %w", err)
	}
	return out, nil
}
