package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestTooManyQueryParametersIsRefused: past Go's 10,000-parameter limit
// URL.Query() returns nothing, and the API answered 200 with every filter
// dropped; it must refuse instead.
func TestTooManyQueryParametersIsRefused(t *testing.T) {
	st := storetest.New(t)
	h := api.NewRouter(st, api.Options{})
	var b strings.Builder
	b.WriteString("/api/v1/idle/groups?node=n1")
	for i := range 10_000 {
		fmt.Fprintf(&b, "&node=n%d", i)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, b.String(), nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "10001 parameters, over the 10000") {
		t.Errorf("GET with 10,001 parameters = %d %s, want 400 naming the count", rec.Code, rec.Body.String())
	}
}

// TestHeatmapAnswerIsCapped: four of these (500 nodes × 2,377 hourly
// buckets each) took the collector past its 1 GiB limit.
func TestHeatmapAnswerIsCapped(t *testing.T) {
	st := storetest.New(t)
	h := api.NewRouter(st, api.Options{})
	var e struct{ Error string }
	code := get(t, h, "/api/v1/idle/heatmap?from=-99d&step=1h&limit=500", nil, &e)
	if code != http.StatusBadRequest || !strings.Contains(e.Error, `parameter limit: "500" times 2377 1h buckets is 1188500 cells, over the 200000`) {
		t.Errorf("99-day hourly heatmap of 500 nodes = %d %q, want 400 naming the cap", code, e.Error)
	}
	if code := get(t, h, "/api/v1/idle/heatmap?from=-99d&step=1d&limit=500", nil, nil); code != http.StatusOK {
		t.Errorf("the same by day = %d, want 200", code)
	}
}

// TestReadStormIsToldToComeBack: with every place taken by a read the
// database holds up, another request gets 429 with Retry-After after
// QueueWait, and a read that outlives Timeout gets 503, never 500.
func TestReadStormIsToldToComeBack(t *testing.T) {
	st := storetest.New(t)
	h := api.NewRouter(st, api.Options{MaxConcurrent: 2, QueueWait: 300 * time.Millisecond,
		Timeout: 3 * time.Second})
	// Hold the profiles table so every read of it waits.
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE profiles IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Go(func() { codes[i] = get(t, h, "/api/v1/profiles", nil, nil) })
	}
	time.Sleep(100 * time.Millisecond) // the two held reads take both places first
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/profiles", nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("a third request while two are held = %d (Retry-After %q) %s, want 429 with Retry-After",
			rec.Code, rec.Header().Get("Retry-After"), rec.Body.String())
	}
	wg.Wait() // the held reads run out of Timeout
	for i, c := range codes {
		if c != http.StatusServiceUnavailable {
			t.Errorf("held read %d = %d, want 503 when the database does not answer in time", i, c)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if code := get(t, h, "/api/v1/profiles", nil, nil); code != http.StatusOK {
		t.Errorf("after the storm = %d, want 200", code)
	}
}
