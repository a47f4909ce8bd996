package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/schedloop/schedloop"
)

// InsertKueueQuotaRecommendation stores a quota proposal and returns its id.
func (s *Store) InsertKueueQuotaRecommendation(ctx context.Context, r schedloop.KueueQuotaRecommendation) (int64, error) {
	if r.Created.IsZero() {
		return 0, errors.New("store kueue quota recommendation: created is zero")
	}
	changes := r.Changes
	if changes == nil {
		changes = []schedloop.KueueQuotaChange{}
	}
	var id int64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO kueue_quota_recommendations (created_at, changes, quota_wait_before_s, quota_wait_after_s,
		    mean_wait_before_s, mean_wait_after_s, jobs, patch)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
		r.Created, changes, r.QuotaWaitBeforeS, r.QuotaWaitAfterS, r.MeanWaitBeforeS, r.MeanWaitAfterS, r.Jobs, r.Patch).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("store kueue quota recommendation: %w", err)
	}
	return id, nil
}

// LatestKueueQuotaRecommendation is the newest stored proposal;
// ErrNotFound when none is.
func (s *Store) LatestKueueQuotaRecommendation(ctx context.Context) (schedloop.KueueQuotaRecommendation, error) {
	var r schedloop.KueueQuotaRecommendation
	err := s.pool.QueryRow(ctx, `
		SELECT id, created_at, changes, quota_wait_before_s, quota_wait_after_s, mean_wait_before_s, mean_wait_after_s, jobs, patch
		FROM kueue_quota_recommendations ORDER BY created_at DESC, id DESC LIMIT 1`).
		Scan(&r.ID, &r.Created, &r.Changes, &r.QuotaWaitBeforeS, &r.QuotaWaitAfterS, &r.MeanWaitBeforeS, &r.MeanWaitAfterS, &r.Jobs, &r.Patch)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, ErrNotFound
	}
	if err != nil {
		return r, fmt.Errorf("read kueue quota recommendation: %w", err)
	}
	return r, nil
}
