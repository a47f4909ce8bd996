// Package dbflags is the one definition of how schedloop's commands are told
// where their database is and how they open and migrate it, so every binary
// accepts the same flag and environment variable with the same errors.
package dbflags

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/schedloop/schedloop/internal/store"
)

// Config is what the flags collect.
type Config struct {
	URL            string
	ConnectTimeout time.Duration
	Migrate        bool
}

// Register adds -database-url and -db-connect-timeout to fs. The URL defaults
// to $DATABASE_URL, then to the local development server.
func Register(fs *flag.FlagSet, getenv func(string) string) *Config {
	c := &Config{}
	def := getenv("DATABASE_URL")
	if def == "" {
		def = store.DefaultURL
	}
	fs.StringVar(&c.URL, "database-url", def,
		"Postgres connection URL (env DATABASE_URL); the schema is created and upgraded in this database")
	fs.DurationVar(&c.ConnectTimeout, "db-connect-timeout", 5*time.Second,
		"how long to wait for Postgres to answer at start-up before giving up")
	return c
}

// RegisterAutoMigrate adds -migrate, for long-running services that bring
// the schema up to date when they start.
func (c *Config) RegisterAutoMigrate(fs *flag.FlagSet) {
	fs.BoolVar(&c.Migrate, "migrate", true,
		"apply pending schema migrations at start-up (safe with several replicas: a lock serialises them)")
}

// Open connects and, when -migrate is set, brings the schema up to date,
// logging what it did to log; otherwise it insists the schema is current.
func (c *Config) Open(ctx context.Context, log io.Writer) (*store.Store, error) {
	s, err := store.Open(ctx, c.URL, store.Options{ConnectTimeout: c.ConnectTimeout})
	if err != nil {
		return nil, err
	}
	if err := c.prepare(ctx, s, log); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// OpenLater is Open for a service that must start while Postgres is away:
// when nothing answers, it returns a store that connects on first use, and
// brings the schema up to date (or checks it) in the background once
// Postgres answers; ready is closed then. Until that, the store's callers
// see errors and retry, as they do when Postgres goes away later. Any other
// failure (a refused password, a newer schema) is returned as from Open.
func (c *Config) OpenLater(ctx context.Context, log io.Writer) (s *store.Store, ready <-chan struct{}, err error) {
	done := make(chan struct{})
	s, err = c.Open(ctx, log)
	if err == nil {
		close(done)
		return s, done, nil
	}
	if !errors.Is(err, store.ErrUnreachable) {
		return nil, nil, err
	}
	fmt.Fprintf(log, "%v\nstarting anyway; the schema is prepared once Postgres answers\n", err)
	if s, err = store.Open(ctx, c.URL, store.Options{ConnectTimeout: c.ConnectTimeout, Lazy: true}); err != nil {
		return nil, nil, err
	}
	go func() {
		backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 30 * time.Second}
		last := ""
		for {
			err := c.prepare(ctx, s, log)
			if err == nil {
				close(done)
				return
			}
			if ctx.Err() != nil {
				return
			}
			if err.Error() != last {
				last = err.Error()
				fmt.Fprintf(log, "schema not prepared yet, retrying: %v\n", err)
			}
			t := time.NewTimer(backoff.Step())
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return s, done, nil
}

// prepare migrates the schema or, with -migrate=false, insists it is current.
func (c *Config) prepare(ctx context.Context, s *store.Store, log io.Writer) error {
	if !c.Migrate {
		return s.RequireCurrentSchema(ctx)
	}
	st, err := s.Migrate(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "database schema at migration %d (latest known %d)\n", st.Current, st.Latest)
	return nil
}
