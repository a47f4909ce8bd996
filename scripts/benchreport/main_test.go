package main

import (
	"io"
	"strings"
	"testing"
)

func TestRunPrintsMedianOfHeadlineMetrics(t *testing.T) {
	in := `goos: linux
BenchmarkBulkIngest-2   3   1419143677 ns/op   266910 raw@rows/s   1.119 ratio@ratio   298589 ingest@rows/s
BenchmarkBulkIngest-2   3   1346006403 ns/op   288835 raw@rows/s   1.059 ratio@ratio   306016 ingest@rows/s
BenchmarkBulkIngest-2   3   1072769113 ns/op   352574 raw@rows/s   1.122 ratio@ratio   395646 ingest@rows/s
BenchmarkOther-2   10   5 ns/op   7 B/op
PASS
`
	var out strings.Builder
	if err := run(strings.NewReader(in), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	want := "BENCH raw 288835 rows/s\nBENCH ratio 1.119 ratio\nBENCH ingest 306016 rows/s\n"
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestRunRejectsGarbledValue(t *testing.T) {
	err := run(strings.NewReader("BenchmarkX-2 1 5 ns/op abc ratio@ratio\n"), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `"abc"`) {
		t.Fatalf("err = %v, want it to quote the bad value", err)
	}
}

func TestMedianEvenCount(t *testing.T) {
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
}
