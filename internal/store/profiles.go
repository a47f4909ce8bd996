package store

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/schedloop/schedloop"
)

// InsertProfile stores a new profile and returns its ID. Names are unique:
// a profile is immutable evidence, so a second insert under the same name is
// an error rather than an overwrite.
func (s *Store) InsertProfile(ctx context.Context, p schedloop.Profile) (int64, error) {
	if err := checkProfileName(p.Name); err != nil {
		return 0, fmt.Errorf("insert profile: %w", err)
	}
	status := p.Status
	if status == "" {
		status = schedloop.ProfileProposed
	}
	var id int64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO profiles (name, status, weights, queue_limits, gang_timeout_seconds, evidence, predicted, measured,
		    parent_id, reason, applied_at, order_policy, starvation_bound_seconds, reservation,
		    reservation_threshold_seconds, preempt_min_run_time_seconds)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, nullif($9, 0), $10, $11, $12, $13, $14, $15, $16)
		RETURNING id`,
		p.Name, string(status), orEmpty(p.Weights), orEmpty(p.QueueLimits), p.GangTimeoutSeconds, orEmpty(p.Evidence),
		orEmpty(p.Predicted), orEmpty(p.Measured), p.ParentID, p.Reason, nullTime(p.Applied),
		p.Order, p.StarvationBoundSeconds, p.Reservation, p.ReservationThresholdSeconds, p.PreemptMinRunTimeSeconds).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert profile %q: %w", p.Name, err)
	}
	return id, nil
}

const profileColumns = `id, name, status, weights, queue_limits, gang_timeout_seconds, evidence, predicted, measured,
	coalesce(parent_id, 0), reason, created_at, applied_at, order_policy, starvation_bound_seconds, reservation,
	reservation_threshold_seconds, preempt_min_run_time_seconds`

func scanProfile(r pgx.Row) (schedloop.Profile, error) {
	var p schedloop.Profile
	var status string
	var applied pgtype.Timestamptz
	err := r.Scan(&p.ID, &p.Name, &status, &p.Weights, &p.QueueLimits, &p.GangTimeoutSeconds, &p.Evidence,
		&p.Predicted, &p.Measured, &p.ParentID, &p.Reason, &p.Created, &applied, &p.Order, &p.StarvationBoundSeconds,
		&p.Reservation, &p.ReservationThresholdSeconds, &p.PreemptMinRunTimeSeconds)
	p.Status, p.Applied = schedloop.ProfileStatus(status), fromNullTime(applied)
	return p, err
}

// GetProfile reads a profile by ID.
func (s *Store) GetProfile(ctx context.Context, id int64) (schedloop.Profile, error) {
	p, err := scanProfile(s.pool.QueryRow(ctx, `SELECT `+profileColumns+` FROM profiles WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, fmt.Errorf("profile %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("read profile %d: %w", id, err)
	}
	return p, nil
}

// ListProfiles returns profiles newest first, optionally only one status,
// at most limit of them (0 means 100).
func (s *Store) ListProfiles(ctx context.Context, status schedloop.ProfileStatus, limit int) ([]schedloop.Profile, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT `+profileColumns+` FROM profiles
		WHERE $1 = '' OR status = $1 ORDER BY created_at DESC, id DESC LIMIT $2`, string(status), limit)
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.Profile, error) { return scanProfile(r) })
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	return out, nil
}

// ApplyProfile marks a profile applied and every other applied profile
// superseded, in one transaction, so at most one profile is ever applied.
func (s *Store) ApplyProfile(ctx context.Context, id int64, at time.Time) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE profiles SET status = 'superseded' WHERE status = 'applied' AND id <> $1`, id); err != nil {
			return fmt.Errorf("supersede applied profiles: %w", err)
		}
		tag, err := tx.Exec(ctx, `UPDATE profiles SET status = 'applied', applied_at = $2 WHERE id = $1`, id, at)
		if err != nil {
			return fmt.Errorf("apply profile %d: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("apply profile %d: %w", id, ErrNotFound)
		}
		return nil
	})
}

// SetProfileStatus records a status change such as a rollback or a rejection, with why.
func (s *Store) SetProfileStatus(ctx context.Context, id int64, status schedloop.ProfileStatus, reason string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE profiles SET status = $2, reason = $3 WHERE id = $1`, id, string(status), reason)
	if err != nil {
		return fmt.Errorf("set profile %d status to %s: %w", id, status, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set profile %d status: %w", id, ErrNotFound)
	}
	return nil
}

// RecordMeasured stores the outcome measured after a profile was applied,
// next to what the tuner predicted.
func (s *Store) RecordMeasured(ctx context.Context, id int64, measured map[string]float64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE profiles SET measured = $2 WHERE id = $1`, id, orEmpty(measured))
	if err != nil {
		return fmt.Errorf("record measured outcome of profile %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("record measured outcome of profile %d: %w", id, ErrNotFound)
	}
	return nil
}

// maxProfileName is the longest profile name: it becomes a label value and
// an Event message, and is shown on the dashboard.
const maxProfileName = 253

// checkProfileName refuses names a terminal, a log line or the dashboard
// would show as something else: control characters (a newline forges a
// log line, an escape sequence rewrites the terminal), invalid UTF-8 and
// over-long names.
func checkProfileName(name string) error {
	switch {
	case name == "":
		return errors.New("field name: empty")
	case len(name) > maxProfileName:
		return fmt.Errorf("field name: %d bytes, over %d", len(name), maxProfileName)
	case !utf8.ValidString(name):
		return fmt.Errorf("field name: %q is not valid UTF-8", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("field name: %q holds a control character (%U)", name, r)
		}
	}
	return nil
}
