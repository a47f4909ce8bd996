package dcgm

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/schedloop/schedloop"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/ from current output")

// goldenOutput is what a golden file holds: the samples, or the error text.
type goldenOutput struct {
	Samples []schedloop.GPUSample `json:"samples,omitempty"`
	Error   string                `json:"error,omitempty"`
}

// checkGolden compares got, as indented JSON, with the file at path, or
// rewrites the file under -update.
func checkGolden(t *testing.T, path string, got any) {
	t.Helper()
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(b, want) {
		t.Errorf("output differs from %s (rerun with -update and review the diff):\n%s", path, b)
	}
}
