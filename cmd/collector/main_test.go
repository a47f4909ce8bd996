package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/schedloop/schedloop/internal/metricnames"
	"github.com/schedloop/schedloop/internal/store/storetest"
	"github.com/schedloop/schedloop/migrations"
)

func env(url string) func(string) string {
	return func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}
}

func TestMigrateCommand(t *testing.T) {
	url := storetest.URL(t)
	// The expected texts follow the migrations the binary embeds, so adding
	// one does not break this test.
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("embedded migrations: %v, %d files", err, len(files))
	}
	n := len(files)
	var pending []string
	for i := 1; i <= n; i++ {
		pending = append(pending, strconv.Itoa(i))
	}
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "status"}, fmt.Sprintf("schema at migration 0, binary knows up to %d, pending [%s]", n, strings.Join(pending, " "))},
		{[]string{"migrate", "up"}, fmt.Sprintf("schema at migration %d (latest %d)", n, n)},
		{[]string{"migrate", "status"}, fmt.Sprintf("schema at migration %d, binary knows up to %d, pending []", n, n)},
		{[]string{"migrate", "down", "0"}, "schema rolled back to migration 0"},
		{[]string{"migrate", "-database-url", url, "up"}, fmt.Sprintf("schema at migration %d (latest %d)", n, n)},
	}
	for _, st := range steps {
		var out strings.Builder
		if err := run(context.Background(), st.args, env(url), &out, io.Discard); err != nil {
			t.Fatalf("collector %v: %v", st.args, err)
		}
		if !strings.Contains(out.String(), st.want) {
			t.Errorf("collector %v printed %q, want %q", st.args, out.String(), st.want)
		}
	}
}

func TestCommandErrorsNameTheProblem(t *testing.T) {
	url := storetest.URL(t)
	tests := []struct {
		args []string
		want string
	}{
		{nil, "missing command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"migrate"}, "missing action"},
		{[]string{"migrate", "sideways"}, `unknown action "sideways"`},
		{[]string{"migrate", "down", "-3"}, `version "-3" is not a migration number`},
		{[]string{"migrate", "-database-url", "postgres://u@127.0.0.1:1/x?connect_timeout=2", "status"}, "nothing answered at 127.0.0.1:1"},
		{[]string{"serve", "-listen", "256.0.0.1:99999"}, "flag -listen"},
		{[]string{"serve", "extra"}, `unexpected argument "extra"`},
	}
	for _, tc := range tests {
		err := run(context.Background(), tc.args, env(url), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("collector %v: err = %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
	if err := run(context.Background(), []string{"serve", "-h"}, env(url), io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("serve -h: err = %v, want flag.ErrHelp", err)
	}
}

func TestServeAnswersHealthReadinessAndMetrics(t *testing.T) {
	url := storetest.URL(t)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-listen", "127.0.0.1:0"}, env(url), pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("read listen address: %v", err)
	}
	go io.Copy(io.Discard, pr)
	base := strings.TrimSpace(strings.TrimPrefix(line, "collector listening on "))
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ok", "/metrics": "go_goroutines"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s = %d %q, want 200 containing %q", path, resp.StatusCode, body, want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v after cancel, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop after its context was cancelled")
	}
}

// TestServeMetricsLint runs promlint over collector serve's /metrics with an
// exporter to scrape, so the scrape, ingest and rollup families are there.
func TestServeMetricsLint(t *testing.T) {
	url := storetest.URL(t)
	exp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="n"} 5`)
	}))
	t.Cleanup(exp.Close)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-listen", "127.0.0.1:0", "-kubeconfig", "off", "-scrape-interval", "100ms",
			"-dcgm-exporter-url", exp.URL + "/metrics"}, env(url), pw, io.Discard)
		pw.Close()
	}()
	defer func() { cancel(); <-done }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("read listen address: %v", err)
	}
	go io.Copy(io.Discard, pr)
	base := strings.TrimSpace(strings.TrimPrefix(line, "collector listening on "))
	var families map[string]*dto.MetricFamily
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		families, err = metricnames.Scrape(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if f := families["schedloop_collector_scrapes_total"]; f != nil && f.GetMetric()[0].GetCounter().GetValue() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no scrape counted on /metrics within 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{"schedloop_collector_scrape_errors_total", "schedloop_collector_samples_written_total", "schedloop_collector_leader", "go_goroutines"} {
		if families[want] == nil {
			t.Errorf("/metrics has no %s", want)
		}
	}
	problems, err := metricnames.Problems(slices.Collect(maps.Values(families)))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
