package collector_test

import (
	"testing"

	"github.com/schedloop/schedloop/internal/harness/exporter"
)

// serveLikeDCGMExporter serves page as exporter.ServePage does until the
// test ends.
func serveLikeDCGMExporter(tb testing.TB, page []byte) string {
	tb.Helper()
	url, stop, err := exporter.ServePage(page)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return url
}
