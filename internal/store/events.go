package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/schedloop/schedloop"
)

const insertAttemptSQL = `
INSERT INTO scheduling_attempts (attempt_key, pod_uid, at, result, category, total_nodes, reasons, message)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (attempt_key) DO NOTHING`

// InsertAttempts stores scheduling attempts, ignoring any whose Key is
// already stored, and reports how many were new.
func (s *Store) InsertAttempts(ctx context.Context, attempts []schedloop.SchedulingAttempt) (int64, error) {
	b := &pgx.Batch{}
	for _, a := range attempts {
		if a.Key == "" {
			return 0, fmt.Errorf("insert attempt for pod %s at %s: key is empty (it de-duplicates re-lists)", a.PodUID, a.At)
		}
		category := a.Category
		if category == "" {
			category = schedloop.WaitOther
		}
		b.Queue(insertAttemptSQL, a.Key, a.PodUID, a.At, string(a.Result), string(category), a.TotalNodes,
			orEmpty(a.Reasons), a.Message)
	}
	br := s.pool.SendBatch(ctx, b)
	var inserted int64
	for range attempts {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return inserted, fmt.Errorf("insert %d scheduling attempts: %w", len(attempts), err)
		}
		inserted += tag.RowsAffected()
	}
	if err := br.Close(); err != nil {
		return inserted, fmt.Errorf("insert %d scheduling attempts: %w", len(attempts), err)
	}
	return inserted, nil
}

// PodAttempts returns a pod's scheduling attempts in time order.
func (s *Store) PodAttempts(ctx context.Context, podUID string) ([]schedloop.SchedulingAttempt, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT attempt_key, pod_uid, at, result, category, total_nodes, reasons, message
		FROM scheduling_attempts WHERE pod_uid = $1 ORDER BY at, id`, podUID)
	if err != nil {
		return nil, fmt.Errorf("read attempts of pod %s: %w", podUID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.SchedulingAttempt, error) {
		var a schedloop.SchedulingAttempt
		var result, category string
		err := r.Scan(&a.Key, &a.PodUID, &a.At, &result, &category, &a.TotalNodes, &a.Reasons, &a.Message)
		a.Result, a.Category = schedloop.AttemptResult(result), schedloop.WaitCategory(category)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("read attempts of pod %s: %w", podUID, err)
	}
	return out, nil
}

// Kubernetes aggregates a repeating event into one object with a growing
// count; the stored row follows the object, keeping the largest count and
// the widest time span seen.
const upsertEventSQL = `
INSERT INTO k8s_events (uid, namespace, involved_kind, involved_name, involved_uid, reason, type, message, source,
    count, first_seen, last_seen)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (uid) DO UPDATE SET
    message = EXCLUDED.message,
    count = greatest(k8s_events.count, EXCLUDED.count),
    first_seen = least(k8s_events.first_seen, EXCLUDED.first_seen),
    last_seen = greatest(k8s_events.last_seen, EXCLUDED.last_seen)`

// UpsertEvents stores Kubernetes events.
func (s *Store) UpsertEvents(ctx context.Context, events []schedloop.Event) error {
	b := &pgx.Batch{}
	for _, e := range events {
		if e.FirstSeen.IsZero() || e.LastSeen.IsZero() {
			return fmt.Errorf("upsert event %s (%s on %s/%s): first or last seen time is missing",
				e.UID, e.Reason, e.Namespace, e.InvolvedName)
		}
		b.Queue(upsertEventSQL, e.UID, e.Namespace, e.InvolvedKind, e.InvolvedName, e.InvolvedUID, e.Reason, e.Type,
			e.Message, e.Source, max(e.Count, 1), e.FirstSeen, e.LastSeen)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("upsert %d events: %w", len(events), err)
	}
	return nil
}

// EventsFor returns the stored events about one object, oldest first.
func (s *Store) EventsFor(ctx context.Context, involvedUID string) ([]schedloop.Event, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT uid, namespace, involved_kind, involved_name, involved_uid, reason, type, message, source, count,
		       first_seen, last_seen
		FROM k8s_events WHERE involved_uid = $1 ORDER BY last_seen, uid`, involvedUID)
	if err != nil {
		return nil, fmt.Errorf("read events of %s: %w", involvedUID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.Event, error) {
		var e schedloop.Event
		err := r.Scan(&e.UID, &e.Namespace, &e.InvolvedKind, &e.InvolvedName, &e.InvolvedUID, &e.Reason, &e.Type,
			&e.Message, &e.Source, &e.Count, &e.FirstSeen, &e.LastSeen)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read events of %s: %w", involvedUID, err)
	}
	return out, nil
}
