package store

import (
	"context"
	"fmt"

	"github.com/schedloop/schedloop"
)

// batchMemory is how long a stored batch id is remembered: far longer than a
// spool file waits for Postgres to come back.
const batchMemory = "30 days"

// CopyGPUSamplesOnce is CopyGPUSampleChunksOnce of one slice.
func (s *Store) CopyGPUSamplesOnce(ctx context.Context, batchID string, samples []schedloop.GPUSample) (stored bool, err error) {
	return s.CopyGPUSampleChunksOnce(ctx, batchID, [][]schedloop.GPUSample{samples})
}

// CopyGPUSampleChunksOnce stores a batch identified by batchID at most once:
// the id is recorded in the same transaction as the COPY, and a batch whose
// id is already recorded is skipped (stored false, no error). A caller that
// sends the same batch again under the same id after any error, including
// one that came after Postgres committed (the connection dropped before the
// acknowledgement arrived), stores it exactly once.
//
// It costs two statements and a commit round trip more than
// CopyGPUSampleChunks; BenchmarkBulkIngest measures the difference at the
// collector's batch size (store_once_ratio).
func (s *Store) CopyGPUSampleChunksOnce(ctx context.Context, batchID string, chunks [][]schedloop.GPUSample) (stored bool, err error) {
	if batchID == "" {
		return false, fmt.Errorf("copy GPU sample batch: empty batch id")
	}
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	days, err := sampleDays(chunks...)
	if err != nil {
		return false, fmt.Errorf("copy GPU sample batch %s: %w", batchID, err)
	}
	if err := s.ensureDayPartitions(ctx, days); err != nil {
		return false, fmt.Errorf("copy GPU sample batch %s: %w", batchID, err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("copy GPU sample batch %s: %w", batchID, err)
	}
	defer tx.Rollback(ctx)
	tag, err := tx.Exec(ctx, `INSERT INTO ingested_batches (batch_id, samples) VALUES ($1, $2) ON CONFLICT (batch_id) DO NOTHING`,
		batchID, n)
	if err != nil {
		return false, fmt.Errorf("copy GPU sample batch %s: record id: %w", batchID, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	if n > 0 {
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, &sampleCopyReader{chunks: chunks}, copySamplesSQL); err != nil {
			return false, fmt.Errorf("copy GPU sample batch %s (%d samples): %w", batchID, n, err)
		}
	}
	// An index range scan (migration 00009) that almost always finds
	// nothing; concurrent writers delete in the same index order, so they
	// wait on each other rather than deadlock.
	if _, err := tx.Exec(ctx, `DELETE FROM ingested_batches WHERE stored_at < now() - $1::interval`, batchMemory); err != nil {
		return false, fmt.Errorf("copy GPU sample batch %s: forget old ids: %w", batchID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("copy GPU sample batch %s: commit: %w", batchID, err)
	}
	return true, nil
}

// BatchStored reports whether a batch id is recorded as stored.
func (s *Store) BatchStored(ctx context.Context, batchID string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ingested_batches WHERE batch_id = $1)`, batchID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up sample batch %s: %w", batchID, err)
	}
	return ok, nil
}
