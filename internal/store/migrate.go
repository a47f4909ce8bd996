package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/schedloop/schedloop/migrations"
)

// ErrSchemaTooNew means the database was migrated by a newer schedloop than
// this binary; running against it could corrupt data the binary does not
// understand.
var ErrSchemaTooNew = errors.New("database schema is newer than this binary")

// ErrSchemaTooOld means the database lacks migrations this binary needs.
var ErrSchemaTooOld = errors.New("database schema is older than this binary")

// MigrationState reports where the schema stands.
type MigrationState struct {
	// Current is the version applied to the database (0 for an empty one).
	Current int64
	// Latest is the newest version embedded in this binary.
	Latest int64
	// Pending lists versions this binary would apply.
	Pending []int64
}

// migrator opens a goose provider over the pool. The session lock makes
// concurrent start-ups (collector, tuner, scheduler) apply each migration
// exactly once.
func (s *Store) migrator() (*goose.Provider, *sql.DB, error) {
	db := stdlib.OpenDBFromPool(s.pool)
	// Probe every second (goose's floor) rather than every five: a start-up
	// that finds another holding the lock waits for a migration that usually
	// takes milliseconds. Five minutes in all, as goose's default.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("create migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithSessionLocker(locker))
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("load embedded migrations: %w", err)
	}
	return p, db, nil
}

func latest(p *goose.Provider) int64 {
	var v int64
	for _, src := range p.ListSources() {
		v = max(v, src.Version)
	}
	return v
}

// MigrationStatus reports the schema version without changing anything.
func (s *Store) MigrationStatus(ctx context.Context) (MigrationState, error) {
	p, db, err := s.migrator()
	if err != nil {
		return MigrationState{}, err
	}
	defer db.Close()
	statuses, err := p.Status(ctx)
	if err != nil {
		return MigrationState{}, fmt.Errorf("read migration status: %w", err)
	}
	current, err := p.GetDBVersion(ctx)
	if err != nil {
		return MigrationState{}, fmt.Errorf("read schema version: %w", err)
	}
	st := MigrationState{Current: current, Latest: latest(p)}
	for _, m := range statuses {
		if m.State == goose.StatePending {
			st.Pending = append(st.Pending, m.Source.Version)
		}
	}
	return st, nil
}

// Migrate brings the schema up to the newest embedded version. It refuses,
// with ErrSchemaTooNew, a database that a newer binary already migrated.
func (s *Store) Migrate(ctx context.Context) (MigrationState, error) {
	return s.migrateWith(ctx, "apply migrations", func(p *goose.Provider) error {
		_, err := p.Up(ctx)
		return err
	})
}

// MigrateDownTo rolls the schema back to version (0 removes everything).
func (s *Store) MigrateDownTo(ctx context.Context, version int64) (MigrationState, error) {
	st, err := s.migrateWith(ctx, fmt.Sprintf("roll back migrations to version %d", version), func(p *goose.Provider) error {
		_, err := p.DownTo(ctx, version)
		return err
	})
	// Dropped tables take their partitions with them.
	s.partitions.reset()
	return st, err
}

// migrateWith runs one schema change under the same guard: never touch a
// schema newer than this binary, and report where the schema ended up.
func (s *Store) migrateWith(ctx context.Context, what string, change func(*goose.Provider) error) (MigrationState, error) {
	p, db, err := s.migrator()
	if err != nil {
		return MigrationState{}, err
	}
	defer db.Close()
	if err := checkNotTooNew(ctx, p); err != nil {
		return MigrationState{}, err
	}
	if err := change(p); err != nil {
		return MigrationState{}, fmt.Errorf("%s: %w", what, err)
	}
	current, err := p.GetDBVersion(ctx)
	if err != nil {
		return MigrationState{}, fmt.Errorf("read schema version after %s: %w", what, err)
	}
	return MigrationState{Current: current, Latest: latest(p)}, nil
}

func checkNotTooNew(ctx context.Context, p *goose.Provider) error {
	current, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if known := latest(p); current > known {
		return fmt.Errorf("%w: the database is at migration %d but this binary knows migrations up to %d; "+
			"run a schedloop release that includes migration %d, or point DATABASE_URL at another database",
			ErrSchemaTooNew, current, known, current)
	}
	return nil
}

// RequireCurrentSchema checks, without changing anything, that the database
// is at exactly the schema this binary was built for. Commands that do not
// migrate call it so they fail with a clear message instead of a missing
// table error halfway through.
func (s *Store) RequireCurrentSchema(ctx context.Context) error {
	st, err := s.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	switch {
	case st.Current > st.Latest:
		return fmt.Errorf("%w: the database is at migration %d but this binary knows migrations up to %d",
			ErrSchemaTooNew, st.Current, st.Latest)
	case st.Current < st.Latest:
		return fmt.Errorf("%w: the database is at migration %d and this binary needs %d; "+
			"run `collector migrate up` (or start the collector, which migrates)", ErrSchemaTooOld, st.Current, st.Latest)
	}
	return nil
}
