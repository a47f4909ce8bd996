package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/schedloop/schedloop"
)

const upsertKueueClusterQueueSQL = `
INSERT INTO kueue_cluster_queues (name, cohort, fair_weight, queueing_strategy,
    reclaim_within_cohort, borrow_within_cohort, within_cluster_queue,
    when_can_borrow, when_can_preempt, fungibility_preference, observed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (name) DO UPDATE SET
    cohort = EXCLUDED.cohort, fair_weight = EXCLUDED.fair_weight,
    queueing_strategy = EXCLUDED.queueing_strategy,
    reclaim_within_cohort = EXCLUDED.reclaim_within_cohort,
    borrow_within_cohort = EXCLUDED.borrow_within_cohort,
    within_cluster_queue = EXCLUDED.within_cluster_queue,
    when_can_borrow = EXCLUDED.when_can_borrow,
    when_can_preempt = EXCLUDED.when_can_preempt,
    fungibility_preference = EXCLUDED.fungibility_preference,
    observed_at = EXCLUDED.observed_at
WHERE kueue_cluster_queues.observed_at <= EXCLUDED.observed_at`

// UpsertKueueClusterQueues stores each ClusterQueue as last observed: its
// spec and its quotas replace what was stored (a flavour dropped from the
// spec is dropped here). An observation older than the stored one is
// ignored, so a late retry of an old flush cannot undo a newer one.
func (s *Store) UpsertKueueClusterQueues(ctx context.Context, qs []schedloop.KueueClusterQueue) error {
	for _, q := range qs {
		if q.Name == "" {
			return fmt.Errorf("store kueue cluster queue: name is empty")
		}
		if q.ObservedAt.IsZero() {
			return fmt.Errorf("store kueue cluster queue %s: observed_at is zero", q.Name)
		}
		for _, r := range q.Quotas {
			if r.Flavor == "" || r.Resource == "" {
				return fmt.Errorf("store kueue cluster queue %s: quota flavor %q resource %q: both are required", q.Name, r.Flavor, r.Resource)
			}
		}
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, q := range qs {
			tag, err := tx.Exec(ctx, upsertKueueClusterQueueSQL, q.Name, q.Cohort, q.FairWeight, q.QueueingStrategy,
				q.ReclaimWithinCohort, q.BorrowWithinCohort, q.WithinClusterQueue,
				q.WhenCanBorrow, q.WhenCanPreempt, q.FungibilityPreference, q.ObservedAt)
			if err != nil {
				return fmt.Errorf("store kueue cluster queue %s: %w", q.Name, err)
			}
			if tag.RowsAffected() == 0 {
				continue // an older observation
			}
			if _, err := tx.Exec(ctx, `DELETE FROM kueue_cluster_queue_quotas WHERE cluster_queue = $1`, q.Name); err != nil {
				return fmt.Errorf("store kueue cluster queue %s quotas: %w", q.Name, err)
			}
			for i, r := range q.Quotas {
				if _, err := tx.Exec(ctx, `
					INSERT INTO kueue_cluster_queue_quotas (cluster_queue, flavor, resource, nominal, borrowing_limit, lending_limit, reserved, borrowed, position)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
					q.Name, r.Flavor, r.Resource, r.Nominal, r.BorrowingLimit, r.LendingLimit, r.Reserved, r.Borrowed, i); err != nil {
					return fmt.Errorf("store kueue cluster queue %s quota %s/%s: %w", q.Name, r.Flavor, r.Resource, err)
				}
			}
		}
		return nil
	})
}

// DeleteKueueClusterQueue forgets a ClusterQueue the cluster no longer has.
func (s *Store) DeleteKueueClusterQueue(ctx context.Context, name string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM kueue_cluster_queues WHERE name = $1`, name); err != nil {
		return fmt.Errorf("delete kueue cluster queue %s: %w", name, err)
	}
	return nil
}

// KueueClusterQueues reads the stored ClusterQueues by name, each with its
// flavour fungibility and its quotas in the spec order they were stored in
// (flavour and resource order for rows stored before that order was kept).
func (s *Store) KueueClusterQueues(ctx context.Context) ([]schedloop.KueueClusterQueue, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT name, cohort, fair_weight, queueing_strategy, reclaim_within_cohort, borrow_within_cohort,
		       within_cluster_queue, when_can_borrow, when_can_preempt, fungibility_preference, observed_at
		FROM kueue_cluster_queues ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read kueue cluster queues: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.KueueClusterQueue, error) {
		var q schedloop.KueueClusterQueue
		return q, r.Scan(&q.Name, &q.Cohort, &q.FairWeight, &q.QueueingStrategy, &q.ReclaimWithinCohort,
			&q.BorrowWithinCohort, &q.WithinClusterQueue, &q.WhenCanBorrow, &q.WhenCanPreempt,
			&q.FungibilityPreference, &q.ObservedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("read kueue cluster queues: %w", err)
	}
	index := map[string]int{}
	for i, q := range out {
		index[q.Name] = i
	}
	rows, err = s.pool.Query(ctx, `
		SELECT cluster_queue, flavor, resource, nominal, borrowing_limit, lending_limit, reserved, borrowed
		FROM kueue_cluster_queue_quotas ORDER BY cluster_queue, position, flavor, resource`)
	if err != nil {
		return nil, fmt.Errorf("read kueue cluster queue quotas: %w", err)
	}
	var name string
	var r schedloop.KueueQuota
	_, err = pgx.ForEachRow(rows, []any{&name, &r.Flavor, &r.Resource, &r.Nominal, &r.BorrowingLimit, &r.LendingLimit, &r.Reserved, &r.Borrowed}, func() error {
		q := &out[index[name]]
		q.Quotas = append(q.Quotas, r)
		r = schedloop.KueueQuota{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read kueue cluster queue quotas: %w", err)
	}
	return out, nil
}
