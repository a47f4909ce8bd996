package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandlerServesTheBuiltDashboard(t *testing.T) {
	h := Handler()
	for _, tc := range []struct{ path, want, ctype string }{
		{"/", `<script type="module"`, "text/html"},
		{"/why", `<main id="page"`, "text/html"},
		{"/assets/app.js", "Chart", "javascript"},
		{"/assets/index.css", ".kpis", "text/css"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != http.StatusOK || !strings.Contains(string(body), tc.want) || !strings.Contains(rec.Header().Get("Content-Type"), tc.ctype) {
			t.Errorf("GET %s = %d %s, want 200 %s containing %q (run `make web` if dist/ is stale)", tc.path, rec.Code, rec.Header().Get("Content-Type"), tc.ctype, tc.want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST / = %d, want 405", rec.Code)
	}
}
