// Package store is schedloop's only door to Postgres: a pgx connection pool,
// the embedded schema migrations, bulk ingest through COPY and the named
// queries the services use. Nothing outside this package builds SQL.
//
// It knows the domain types of package schedloop and nothing about Kubernetes,
// DCGM or HTTP.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is the database used when DATABASE_URL is unset: the local
// server with trust authentication that a developer machine runs.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// Options tune a Store. The zero value is usable.
type Options struct {
	// MaxConns caps the pool; 0 lets pgx choose (max(4, GOMAXPROCS)).
	MaxConns int32
	// ConnectTimeout bounds the first connection check; default 5s.
	ConnectTimeout time.Duration
	// StatementTimeout bounds each query on the server; 0 leaves the server default.
	StatementTimeout time.Duration
	// Lazy skips the connection check: the pool connects on first use, for
	// a service that must start while Postgres is away.
	Lazy bool
}

// Store wraps a connection pool.
type Store struct {
	pool *pgxpool.Pool
	// partitions remembers which daily sample partitions exist so the ingest
	// hot path asks Postgres only once per day.
	partitions *partitionCache
}

// Open connects to the database at url and checks that it answers. It does
// not migrate: call Migrate.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL is not a valid Postgres connection string (%s): %w", Redact(url), err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if opts.StatementTimeout > 0 {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(opts.StatementTimeout.Milliseconds())
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "schedloop"
	timeout := opts.ConnectTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	cfg.ConnConfig.ConnectTimeout = timeout

	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create connection pool for %s: %w", describe(cfg.ConnConfig.Config), err)
	}
	if opts.Lazy {
		return &Store{pool: pool, partitions: newPartitionCache()}, nil
	}
	pingCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, explainConnectError(cfg.ConnConfig.Config, err)
	}
	return &Store{pool: pool, partitions: newPartitionCache()}, nil
}

// Close releases all connections.
func (s *Store) Close() { s.pool.Close() }

// Pool exposes the pool for packages that stream their own COPY (benchmarks,
// bulk importers). Queries belong in this package.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping checks the database answers; readiness probes call it.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// ErrUnreachable marks a failure to reach the server at all, as opposed to
// the server refusing us.
var ErrUnreachable = errors.New("postgres server unreachable")

func explainConnectError(cfg pgconn.Config, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "3D000":
			return fmt.Errorf("database %q does not exist on %s:%d: create it (createdb %s) or fix DATABASE_URL: %w",
				cfg.Database, cfg.Host, cfg.Port, cfg.Database, err)
		case "28P01", "28000":
			return fmt.Errorf("postgres at %s:%d refused user %q: check the user and password in DATABASE_URL: %w",
				cfg.Host, cfg.Port, cfg.User, err)
		}
		return fmt.Errorf("connect to %s: %w", describe(cfg), err)
	}
	// Anything that is not a server error never got as far as a server that
	// speaks Postgres: refused, timed out, DNS, TLS.
	return fmt.Errorf("%w: nothing answered at %s:%d (%v); start Postgres (make postgres) or set DATABASE_URL",
		ErrUnreachable, cfg.Host, cfg.Port, err)
}

func describe(cfg pgconn.Config) string {
	return fmt.Sprintf("postgres %s:%d database %q user %q", cfg.Host, cfg.Port, cfg.Database, cfg.User)
}

// Redact hides a password in a URL-form connection string so it never
// reaches logs.
func Redact(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return "<not a URL>"
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return url
	}
	if user, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
		return scheme + "://" + user + ":xxxxx@" + host
	}
	return url
}
