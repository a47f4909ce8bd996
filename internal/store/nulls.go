package store

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
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
