// Package storetest gives each test its own empty Postgres database on the
// server at $DATABASE_URL and drops it when the test ends. It never skips: a
// test that needs Postgres and finds none fails, saying how to start one.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/schedloop/schedloop/internal/store"
)

// AdminURL is the server tests create their databases on.
func AdminURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return store.DefaultURL
}

const howToStart = `no Postgres server answers at %s (%v).
Start a throwaway one with:   make postgres        (runs scripts/postgres-local.sh: initdb in a temp dir, Debian's postgresql-15)
or point the tests at one:    DATABASE_URL=postgres://user@host:5432/postgres?sslmode=disable make test`

// URL creates a fresh, empty database and returns a connection URL for it.
func URL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := AdminURL()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf(howToStart, store.Redact(admin), err)
	}
	defer conn.Close(ctx)

	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random database name: %v", err)
	}
	name := "schedloop_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create test database %s on %s: %v", name, store.Redact(admin), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		// FORCE ends connections a failed test left open.
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	return urlFor(admin, name)
}

// New returns a Store on a fresh database with every migration applied.
func New(t testing.TB) *store.Store {
	t.Helper()
	s := Open(t, URL(t))
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate test database: %v", err)
	}
	return s
}

// Open connects to url and closes the store when the test ends.
func Open(t testing.TB, url string) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}
