package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbe(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }))
	defer ok.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "database: connection refused", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	tlsOK := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }))
	defer tlsOK.Close()
	for _, c := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{ok.URL}, ""},
		{[]string{down.URL}, "503"},
		{[]string{tlsOK.URL}, "certificate"},
		{[]string{"-insecure", tlsOK.URL}, ""},
		{[]string{}, "exactly one URL"},
		{[]string{"http://127.0.0.1:1/"}, "refused"},
	} {
		var out, errOut bytes.Buffer
		err := run(t.Context(), c.args, &out, &errOut)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("probe %v: %v", c.args, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("probe %v: %v, want an error containing %q", c.args, err, c.wantErr)
		}
	}
}
