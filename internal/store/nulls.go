package store

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/schedloop/schedloop"
)

// The domain types use the zero time for "has not happened"; the schema uses
// NULL. These two helpers are the whole translation.

func nullTime(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

func fromNullTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}

func orEmpty[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	return m
}

// gangMembers bounds a job's member count to 1..schedloop.MaxGangMembers on
// the way in and out of the jobs table: a PodGroup created before the CRD
// carried its maximum, or a row written by an older release, must not make
// the tuner allocate a billion members.
func gangMembers(n int) int { return min(max(n, 1), schedloop.MaxGangMembers) }
