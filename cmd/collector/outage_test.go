package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/schedloop/schedloop/internal/harness/exporter"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// gate stands between the collector and Postgres: it hangs up on every
// connection until opened, as a Postgres that is down does.
type gate struct {
	ln     net.Listener
	target string
	open   atomic.Bool
}

func newGate(t *testing.T, target string) *gate {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !g.open.Load() {
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", g.target)
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, c)
				io.Copy(c, up)
			}()
		}
	}()
	return g
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestServeStartsWhilePostgresIsAway: the collector starts with Postgres
// down, scrapes into its spool, says it is not ready without naming the
// database's user or host, and stores everything once Postgres answers.
// Unknown /api/ paths answer a JSON 404, not the dashboard's page.
func TestServeStartsWhilePostgresIsAway(t *testing.T) {
	dbURL := storetest.URL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(t, u.Host)
	u.Host = g.ln.Addr().String()
	exp := exporter.New("node-a", exporter.BusyNode{})
	if err := exp.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exp.Close() })
	spool := t.TempDir()

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-listen", "127.0.0.1:0", "-kubeconfig", "off", "-dcgm-exporter-url", exp.URL(),
			"-scrape-interval", "100ms", "-buffer-samples", "8", "-spool-dir", spool, "-db-connect-timeout", "300ms"},
			env(u.String()), pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("serve did not start with Postgres away: %v (%v)", err, <-done)
	}
	go io.Copy(io.Discard, pr)
	base := strings.TrimSpace(strings.TrimPrefix(line, "collector listening on "))

	waitFor(t, "scraped samples in the spool", 20*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(spool, "*.spool"))
		return len(m) >= 3
	})
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(body), u.User.Username()) ||
		strings.Contains(string(body), u.Hostname()) {
		t.Errorf("/readyz with Postgres away = %d %q, want 503 naming neither user nor host", resp.StatusCode, body)
	}
	resp, err = http.Get(base + "/api/v1/no-such-thing")
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ Error string }
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown API path = %d (%v), want a JSON 404", resp.StatusCode, err)
	}
	resp.Body.Close()

	g.open.Store(true)
	s := storetest.Open(t, dbURL)
	waitFor(t, "the spool to drain into Postgres", 60*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(spool, "*.spool"))
		var n int
		err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM gpu_samples`).Scan(&n)
		return err == nil && len(m) == 0 && n >= 3*8
	})
	waitFor(t, "readiness", 30*time.Second, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	if _, err := os.Stat(spool); err != nil {
		t.Fatal(err)
	}
}
