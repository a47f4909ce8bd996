package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Sample partitions are one UTC day each, named gpu_samples_pYYYYMMDD, so that
// retention drops whole tables and queries over a time range prune the rest.

type partitionCache struct {
	mu   sync.Mutex
	days map[time.Time]bool
}

func newPartitionCache() *partitionCache { return &partitionCache{days: map[time.Time]bool{}} }

func (c *partitionCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.days = map[time.Time]bool{}
}

func (c *partitionCache) missing(days []time.Time) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Time
	for _, d := range days {
		if !c.days[d] {
			out = append(out, d)
		}
	}
	return out
}

func (c *partitionCache) add(d time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.days[d] = true
}

func dayOf(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

func partitionName(day time.Time) string { return "gpu_samples_p" + day.Format("20060102") }

// partitionLockKey serialises partition DDL across processes; its value is
// arbitrary but fixed ("schedloop" in ASCII, truncated).
const partitionLockKey = 0x736368656430

// EnsureSamplePartitions creates the daily partitions that cover [from, to].
// Rows that already landed in the default partition for one of those days
// are moved into the new partition, because Postgres refuses to attach a
// partition whose range the default partition still holds rows for.
func (s *Store) EnsureSamplePartitions(ctx context.Context, from, to time.Time) error {
	if to.Before(from) {
		return fmt.Errorf("ensure sample partitions: range end %s is before start %s", to, from)
	}
	var days []time.Time
	for d := dayOf(from); !d.After(dayOf(to)); d = d.AddDate(0, 0, 1) {
		days = append(days, d)
	}
	return s.ensureDayPartitions(ctx, days)
}

// Days outside [partitionFirstYear, partitionEndYear) get no partition of
// their own: their rows land in the default partition, kept but not given a
// table each. The API reads no range outside these years either.
const (
	partitionFirstYear = 2000
	partitionEndYear   = 2200
)

// ensureDayPartitions creates the partitions of days that do not exist yet.
func (s *Store) ensureDayPartitions(ctx context.Context, days []time.Time) error {
	for _, day := range s.partitions.missing(days) {
		if day.Year() < partitionFirstYear || day.Year() >= partitionEndYear {
			continue
		}
		if err := s.createDayPartition(ctx, day); err != nil {
			return err
		}
		s.partitions.add(day)
	}
	return nil
}

func (s *Store) createDayPartition(ctx context.Context, day time.Time) error {
	name := partitionName(day)
	next := day.AddDate(0, 0, 1)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(partitionLockKey)); err != nil {
			return fmt.Errorf("lock sample partitions: %w", err)
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
			return fmt.Errorf("look up partition %s: %w", name, err)
		}
		if exists {
			return nil
		}
		// Stash any stray rows of that day from the default partition.
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE stray_samples ON COMMIT DROP AS
			WITH moved AS (DELETE FROM gpu_samples_default WHERE ts >= $1 AND ts < $2 RETURNING *)
			SELECT * FROM moved`, day, next); err != nil {
			return fmt.Errorf("move default-partition rows for %s: %w", day.Format(time.DateOnly), err)
		}
		ddl := fmt.Sprintf(`CREATE TABLE %s PARTITION OF gpu_samples FOR VALUES FROM ('%s') TO ('%s')`,
			pgx.Identifier{name}.Sanitize(), day.Format(time.RFC3339), next.Format(time.RFC3339))
		if _, err := tx.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("create partition %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO gpu_samples SELECT * FROM stray_samples`); err != nil {
			return fmt.Errorf("restore default-partition rows into %s: %w", name, err)
		}
		return nil
	})
}

// DropSamplePartitionsBefore removes whole days of raw samples older than
// cutoff (the per-minute rollup is kept) and reports how many were dropped.
func (s *Store) DropSamplePartitionsBefore(ctx context.Context, cutoff time.Time) (int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = 'gpu_samples' AND c.relname LIKE 'gpu\_samples\_p%'`)
	if err != nil {
		return 0, fmt.Errorf("list sample partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("list sample partitions: %w", err)
	}
	cut := dayOf(cutoff)
	dropped := 0
	for _, name := range names {
		day, err := time.Parse("20060102", name[len("gpu_samples_p"):])
		if err != nil || day.AddDate(0, 0, 1).After(cut) {
			continue
		}
		if _, err := s.pool.Exec(ctx, "DROP TABLE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return dropped, fmt.Errorf("drop partition %s: %w", name, err)
		}
		dropped++
	}
	s.partitions.reset()
	return dropped, nil
}
