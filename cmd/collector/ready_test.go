package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestReadyzWaitsForTheClusterWatcher: with a cluster configured whose
// apiserver does not answer, the informers never list, so the collector is
// alive but not ready, and says why.
func TestReadyzWaitsForTheClusterWatcher(t *testing.T) {
	url := storetest.URL(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-listen", "127.0.0.1:0", "-kubeconfig", kubeconfig}, env(url), pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("read listen address: %v", err)
	}
	go io.Copy(io.Discard, pr)
	base := strings.TrimSpace(strings.TrimPrefix(line, "collector listening on "))
	for path, want := range map[string]struct {
		code int
		body string
	}{"/healthz": {http.StatusOK, "ok"}, "/readyz": {http.StatusServiceUnavailable, "cluster watcher"}} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want.code || !strings.Contains(string(body), want.body) {
			t.Errorf("GET %s = %d %q, want %d containing %q", path, resp.StatusCode, body, want.code, want.body)
		}
	}
	cancel()
	select {
	case <-done: // the watcher reports that it never listed; that is the point
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop after its context was cancelled")
	}
}
