package api

import (
	"encoding/json"
	"flag"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

var parseNow = time.Date(2026, 11, 30, 10, 17, 42, 0, time.UTC)

// TestParseQueryGolden parses each line of testdata/params.txt (a raw query
// string) and compares what comes out, or the error, with the golden file.
func TestParseQueryGolden(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "params.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(string(in)), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		got.WriteString("? " + line + "\n")
		v, err := url.ParseQuery(line)
		if err != nil {
			t.Fatalf("testdata line %q is not a query string: %v", line, err)
		}
		q, err := ParseQuery(v, parseNow)
		if err != nil {
			got.WriteString("error: " + err.Error() + "\n\n")
			continue
		}
		b, _ := json.Marshal(q)
		got.WriteString(string(b) + "\n\n")
	}
	golden := filepath.Join("testdata", "params.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestParseQueryGolden -update to create it)", err)
	}
	if got.String() != string(want) {
		t.Errorf("parsed queries differ from %s (go test -update rewrites it):\n%s", golden, got.String())
	}
}

func FuzzParseQuery(f *testing.F) {
	in, err := os.ReadFile(filepath.Join("testdata", "params.txt"))
	if err != nil {
		f.Fatal(err)
	}
	for _, line := range strings.Split(string(in), "\n") {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := ParseQuery(v, parseNow)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "parameter ") {
				t.Fatalf("error %q does not name the parameter", err)
			}
			return
		}
		if !q.From.Before(q.To) || q.To.Sub(q.From) > maxRange+48*time.Hour {
			t.Fatalf("range %s..%s accepted", q.From, q.To)
		}
		if q.Limit < 1 || q.Limit > maxLimit {
			t.Fatalf("limit %d accepted", q.Limit)
		}
		if d := q.Step.Duration(); !q.From.Equal(q.From.Truncate(d)) || !q.To.Equal(q.To.Truncate(d)) {
			t.Fatalf("range %s..%s not aligned to %s", q.From, q.To, d)
		}
		if q.Cursor != "" {
			if _, err := ParseQuery(url.Values{"cursor": {encodeCursor(q.Cursor)}}, parseNow); err != nil {
				t.Fatalf("cursor %q does not round-trip: %v", q.Cursor, err)
			}
		}
	})
}
