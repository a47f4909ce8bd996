package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestBackfillLoadsPrometheusHistoryOnce: `collector backfill` reads a
// Prometheus server's query_range answer (the HTTP API format, from the
// dcgm package's golden fixture), stores every sample the backfill source
// makes of it, rolls the minutes up, and a second run adds nothing.
func TestBackfillLoadsPrometheusHistoryOnce(t *testing.T) {
	body, err := os.ReadFile("../../internal/dcgm/testdata/backfill/query_range.json")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query_range" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	start := time.Unix(1717171200, 0).UTC()
	end := start.Add(time.Minute)
	bf, err := dcgm.NewBackfill(srv.URL, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want, err := bf.Range(context.Background(), start, end)
	if err != nil || len(want) == 0 {
		t.Fatalf("fixture gives %d samples (%v)", len(want), err)
	}
	url := storetest.URL(t)
	args := []string{"backfill", "-prometheus-url", srv.URL, "-from", start.Format(time.RFC3339), "-to", end.Add(time.Second).Format(time.RFC3339)}
	var out strings.Builder
	if err := run(context.Background(), args, env(url), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	s := storetest.Open(t, url)
	var n, minutes int
	if err := s.Pool().QueryRow(context.Background(), `SELECT (SELECT count(*) FROM gpu_samples), (SELECT count(*) FROM gpu_minutes)`).Scan(&n, &minutes); err != nil {
		t.Fatal(err)
	}
	if n != len(want) || minutes == 0 {
		t.Errorf("stored %d samples and %d GPU-minutes, want the %d samples the source makes, rolled up (%s)", n, minutes, len(want), out.String())
	}
	out.Reset()
	if err := run(context.Background(), args, env(url), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), " 0 stored, 1 windows already stored before") {
		t.Errorf("second run printed %q, want nothing stored again", out.String())
	}
	if err := run(context.Background(), []string{"backfill", "-prometheus-url", srv.URL, "-from", "yesterday"}, env(url), io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), `flag -from "yesterday"`) {
		t.Errorf("bad -from: %v", err)
	}
}
