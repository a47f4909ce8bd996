package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestImportIsAllOrNothing: a bad row after the first ten thousand, in the
// job file given with a node list, leaves neither nodes nor jobs stored, and
// the error names the line and the field.
func TestImportIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	getenv := migrated(t)
	var b strings.Builder
	b.WriteString("name,arrival_s,duration_s,gpus_per_member,gang_size\n")
	for i := range 10_001 {
		fmt.Fprintf(&b, "j%d,%d,60,1,1\n", i, i)
	}
	b.WriteString("bad,1,60,1,many\n")
	jobs := filepath.Join(t.TempDir(), "jobs.csv")
	if err := os.WriteFile(jobs, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(ctx, []string{"import", "-quiet", "-nodes", phillyNodes, "-jobs", jobs}, getenv, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `line 10003: field gang_size: "many" is not an integer`) {
		t.Fatalf("import = %v, want the bad row's line and field named", err)
	}
	s := storetest.Open(t, getenv("DATABASE_URL"))
	for _, table := range []string{"nodes", "jobs"} {
		var n int
		if err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%d rows in %s after a refused import, want 0", n, table)
		}
	}
}
