package dcgm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// prometheusServer answers /api/v1/query_range with a fixture in the
// Prometheus HTTP API's JSON format and records the requests.
func prometheusServer(t *testing.T, fixture string) (*httptest.Server, func() []map[string]string) {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", "backfill", fixture))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reqs []map[string]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query_range" {
			http.NotFound(w, r)
			return
		}
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		reqs = append(reqs, map[string]string{"query": r.Form.Get("query"), "start": r.Form.Get("start"), "end": r.Form.Get("end"), "step": r.Form.Get("step")})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []map[string]string {
		mu.Lock()
		defer mu.Unlock()
		return reqs
	}
}

func TestBackfillRange(t *testing.T) {
	srv, requests := prometheusServer(t, "query_range.json")
	b, err := NewBackfill(srv.URL, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b.Matchers = `job="nvidia-dcgm-exporter"`
	start := time.Unix(1717171200, 0)
	samples, err := b.Range(context.Background(), start, start.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	reqs := requests()
	if len(reqs) != 1 {
		t.Fatalf("got %d queries, want 1", len(reqs))
	}
	wantQuery := `{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_PROF_SM_ACTIVE|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_POWER_USAGE",job="nvidia-dcgm-exporter"}`
	if reqs[0]["query"] != wantQuery || reqs[0]["step"] != "30" {
		t.Errorf("query %q step %q, want %q step 30", reqs[0]["query"], reqs[0]["step"], wantQuery)
	}
	for _, s := range samples {
		if s.PodName == "nvidia-dcgm-exporter-x7k2p" {
			t.Errorf("sample %+v attributed to the exporter's own pod", s)
		}
	}
	checkGolden(t, filepath.Join("testdata", "backfill", "query_range.golden.json"), goldenOutput{Samples: samples})
}

func TestBackfillSplitsLongRanges(t *testing.T) {
	srv, requests := prometheusServer(t, "empty.json")
	b, err := NewBackfill(srv.URL, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1717171200, 0)
	// 25,000 points at 1 s: three queries of at most 11,000 points.
	if _, err := b.Range(context.Background(), start, start.Add(25000*time.Second)); err != nil {
		t.Fatal(err)
	}
	reqs := requests()
	if len(reqs) != 3 {
		t.Fatalf("got %d queries %v, want 3", len(reqs), reqs)
	}
	if reqs[0]["start"] != "1717171200" || reqs[1]["start"] != "1717182200" || reqs[2]["end"] != "1717196200" {
		t.Errorf("windows %v do not tile the range without overlap", reqs)
	}
}

func TestBackfillErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"parse error at char 3"}`))
	}))
	t.Cleanup(srv.Close)
	b, err := NewBackfill(srv.URL, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1717171200, 0)
	_, err = b.Range(context.Background(), start, start.Add(time.Minute))
	if err == nil || !strings.Contains(err.Error(), "parse error at char 3") || !strings.Contains(err.Error(), "query_range") {
		t.Errorf("error %v, want the query and Prometheus' message", err)
	}
	if _, err := b.Range(context.Background(), start, start.Add(-time.Minute)); err == nil {
		t.Error("end before start: want an error")
	}
}
