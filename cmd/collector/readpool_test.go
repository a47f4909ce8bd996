package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/harness/exporter"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestServeReadsCannotStarveIngest: `collector serve` with its API's
// database reads held up (the table they read is locked) on more
// connections than ingest's pool has keeps storing what it scrapes. Were
// the API reading through ingest's pool, those reads would hold every
// connection ingest writes through and no sample would be stored until
// they ended.
func TestServeReadsCannotStarveIngest(t *testing.T) {
	dbURL := storetest.URL(t)
	exp := exporter.New("node-a", exporter.BusyNode{})
	if err := exp.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exp.Close() })

	// Ingest's pool holds max(4, GOMAXPROCS) connections (pgx's default);
	// the API may hold more.
	ingestPool := max(4, runtime.GOMAXPROCS(0))
	held := ingestPool + 2
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-listen", "127.0.0.1:0", "-kubeconfig", "off", "-dcgm-exporter-url", exp.URL(),
			"-scrape-interval", "100ms", "-api-max-concurrent", fmt.Sprint(held), "-api-queue-wait", "100ms",
			"-api-timeout", "2m"}, env(dbURL), pw, io.Discard)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("serve did not start: %v (%v)", err, <-done)
	}
	go io.Copy(io.Discard, pr)
	base := strings.TrimSpace(strings.TrimPrefix(line, "collector listening on "))

	s := storetest.Open(t, dbURL)
	stored := func() int {
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM gpu_samples`).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	waitFor(t, "the first samples stored", 60*time.Second, func() bool { return stored() > 0 })

	// Hold the profiles table (the collector never writes it) so that every
	// API read of it waits in Postgres, holding its connection.
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `LOCK TABLE profiles IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	codes := make([]int, held)
	for i := range codes {
		wg.Go(func() {
			resp, err := http.Get(base + "/api/v1/profiles")
			if err != nil {
				codes[i] = -1
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	waiting := func() int {
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE '%profiles%'`).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	// As many held reads as ingest has connections: on a shared pool they
	// would hold all of them.
	waitFor(t, fmt.Sprintf("%d API reads waiting on the lock in Postgres", ingestPool), 60*time.Second,
		func() bool { return waiting() >= ingestPool })

	// With those reads held, scrapes keep being stored...
	before := stored()
	waitFor(t, "samples stored while the API's reads are held", 30*time.Second, func() bool { return stored() >= before+3*8 })
	// ...and every read the API admits reaches Postgres.
	waitFor(t, fmt.Sprintf("all %d API reads waiting on the lock", held), 30*time.Second, func() bool { return waiting() == held })

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("held read %d = %d, want 200 once the table is free", i, c)
		}
	}
}
