// Package dbflags is the one definition of how schedloop's commands are told
// where their database is and how they open and migrate it, so every binary
// accepts the same flag and environment variable with the same errors.
package dbflags

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

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
	if !c.Migrate {
		if err := s.RequireCurrentSchema(ctx); err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	}
	st, err := s.Migrate(ctx)
	if err != nil {
		s.Close()
		return nil, err
	}
	fmt.Fprintf(log, "database schema at migration %d (latest known %d)\n", st.Current, st.Latest)
	return s, nil
}
