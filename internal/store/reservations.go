package store

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/schedloop/schedloop/internal/reasons"
)

// Reservation is a reservation standing now, as the stored Events tell it.
type Reservation struct {
	// Scheduler is the Event's source: each scheduler holds one reservation.
	Scheduler string
	// Job is namespace/name of the holder's job (its pod's when the pod
	// belongs to no stored job); Pod namespace/name of the holder's pod.
	Job, Pod string
	// GPUs is what the job asks for in all (0 when the job is not stored).
	GPUs int
	// Nodes are the nodes held, Start the predicted start.
	Nodes []string
	Start time.Time
	// Domain is each topology level at which every held node lies in one
	// domain, with that domain (empty when they share none).
	Domain map[string]string
	// Since is when the job first held the reservation (since it last lost
	// it), Planned when it was last planned.
	Since, Planned time.Time
}

// activeReservationsSQL reads, per scheduler, the latest Reserved Event:
// the reservation standing unless a ReservationReleased Event on the same
// pod came at or after it, or the pod has since been scheduled (the
// reservation is spent when its job starts, with no Event) or finished.
// since is the first Reserved Event on the pod after its last release.
const activeReservationsSQL = `
WITH latest AS (
    SELECT DISTINCT ON (e.source) e.source, e.namespace, e.involved_name, e.involved_uid, e.message, e.last_seen
    FROM k8s_events e
    WHERE e.reason = 'Reserved' AND e.involved_kind = 'Pod'
    ORDER BY e.source, e.last_seen DESC, e.uid DESC
)
SELECT l.source, l.namespace, l.involved_name, l.message, l.last_seen,
       (SELECT min(r.first_seen) FROM k8s_events r
        WHERE r.reason = 'Reserved' AND r.involved_uid = l.involved_uid
          AND r.first_seen > coalesce((SELECT max(x.last_seen) FROM k8s_events x
                                       WHERE x.reason = 'ReservationReleased' AND x.involved_uid = l.involved_uid
                                         AND x.last_seen <= l.last_seen), '-infinity')) AS since,
       coalesce(j.namespace || '/' || j.name, ''), coalesce(j.min_member * j.gpus_per_member, 0)
FROM latest l
LEFT JOIN pods p ON p.uid = l.involved_uid
LEFT JOIN jobs j ON j.uid = p.job_uid
WHERE NOT EXISTS (SELECT 1 FROM k8s_events x
                  WHERE x.reason = 'ReservationReleased' AND x.involved_uid = l.involved_uid AND x.last_seen >= l.last_seen)
  AND (p.uid IS NULL OR (p.scheduled_at IS NULL AND p.finished_at IS NULL AND p.phase NOT IN ('Succeeded', 'Failed', 'Deleted')))
ORDER BY l.source`

// ActiveReservations lists the reservations standing now, one per
// scheduler at most. A Reserved Event whose note is not one schedloop
// writes is skipped and logged: the reservation it stands for cannot be
// shown.
func (s *Store) ActiveReservations(ctx context.Context) ([]Reservation, error) {
	rows, err := s.pool.Query(ctx, activeReservationsSQL)
	if err != nil {
		return nil, fmt.Errorf("read reservations: %w", err)
	}
	type row struct {
		r       Reservation
		message string
		since   *time.Time
	}
	read, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (row, error) {
		var x row
		var ns, pod string
		err := cr.Scan(&x.r.Scheduler, &ns, &pod, &x.message, &x.r.Planned, &x.since, &x.r.Job, &x.r.GPUs)
		x.r.Pod = ns + "/" + pod
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read reservations: %w", err)
	}
	out := make([]Reservation, 0, len(read))
	for _, x := range read {
		note, ok := reasons.ParseReservation(x.message)
		if !ok {
			slog.Warn("Reserved Event note not understood; reservation not shown", "pod", x.r.Pod, "note", x.message)
			continue
		}
		r := x.r
		r.Nodes, r.Start = note.Nodes, note.Start
		if r.Job == "" {
			r.Job = r.Pod
		}
		r.Since = r.Planned
		if x.since != nil {
			r.Since = *x.since
		}
		if r.Domain, err = s.sharedDomain(ctx, r.Nodes); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// sharedDomain is each topology level at which every one of nodes lies in
// the same domain. A node not stored shares none.
func (s *Store) sharedDomain(ctx context.Context, nodes []string) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, topology FROM nodes WHERE name = ANY($1)`, nodes)
	if err != nil {
		return nil, fmt.Errorf("read topology of reserved nodes: %w", err)
	}
	type topo struct {
		name   string
		levels map[string]string
	}
	read, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (topo, error) {
		var t topo
		var raw []byte
		if err := cr.Scan(&t.name, &raw); err != nil {
			return t, err
		}
		return t, json.Unmarshal(raw, &t.levels)
	})
	if err != nil {
		return nil, fmt.Errorf("read topology of reserved nodes: %w", err)
	}
	shared := map[string]string{}
	if len(read) == 0 || len(read) < len(slices.Compact(slices.Sorted(slices.Values(nodes)))) {
		return shared, nil
	}
	for k, v := range read[0].levels {
		same := true
		for _, t := range read[1:] {
			if t.levels[k] != v {
				same = false
				break
			}
		}
		if same {
			shared[k] = v
		}
	}
	return shared, nil
}
