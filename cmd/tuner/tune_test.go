package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/store/storetest"
)

const (
	phillyJobs  = "../../internal/trace/testdata/philly/pollux_philly_head300.csv"
	phillyNodes = "../../internal/trace/testdata/philly/cluster_machine_list_head40.csv"
)

func migrated(t *testing.T) func(string) string {
	t.Helper()
	url := storetest.URL(t)
	if _, err := storetest.Open(t, url).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}
}

func TestImportRunExplain(t *testing.T) {
	ctx := context.Background()
	getenv := migrated(t)
	var out strings.Builder
	if err := run(ctx, []string{"import", "-quiet", "-jobs", phillyJobs, "-nodes", phillyNodes}, getenv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "imported 40 nodes") || !strings.Contains(out.String(), "imported 300 jobs") {
		t.Errorf("import printed %q", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"import", "-quiet", "-jobs", phillyJobs}, getenv, &out, io.Discard); err != nil ||
		!strings.Contains(out.String(), "0 new, 300 already stored") {
		t.Errorf("a second import: %v, %q", err, out.String())
	}

	dir := t.TempDir()
	sched := filepath.Join(dir, "kube-scheduler.yaml")
	report := filepath.Join(dir, "report.json")
	out.Reset()
	args := []string{"run", "-quiet", "-name", "tuned-a", "-since", "2400h", "-replays", "2", "-rounds", "1",
		"-scheduler-config-out", sched, "-report-out", report}
	// The stored history starts 2026-01-01: replay it as of a fixed "now" via -since from the real clock.
	args[5] = (time.Since(time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)) + time.Hour).Round(time.Hour).String()
	if err := run(ctx, args, getenv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"profile tuned-a (from default)", "held-out days:", "stored profile tuned-a", "wrote KubeSchedulerConfiguration", "check: tuner verify tuned-a"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run output lacks %q:\n%s", want, out.String())
		}
	}
	if b, err := os.ReadFile(sched); err != nil || !strings.Contains(string(b), "kind: KubeSchedulerConfiguration") {
		t.Errorf("scheduler config: %v %s", err, b)
	}
	out.Reset()
	if err := run(ctx, []string{"explain", "tuned-a"}, getenv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "status: ") || !strings.Contains(out.String(), "objective gain") {
		t.Errorf("explain printed:\n%s", out.String())
	}
	// The whole window's stored figures are printed beside the held-out
	// ones: a mean JCT line of the stored prediction with no figure missing.
	_, stored, _ := strings.Cut(out.String(), "stored prediction (current -> proposed):")
	if line := lineWith(stored, "mean_jct_s"); line == "" || strings.Contains(line, "n/a") || strings.Count(line, "->") != 2 {
		t.Errorf("explain's stored prediction lacks the held-out and whole-window mean JCT:\n%s", out.String())
	}
	var fromFile strings.Builder
	if err := run(ctx, []string{"explain", "-report", report}, getenv, &fromFile, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), fromFile.String()) {
		t.Errorf("the stored evidence and the report file explain differently:\n%s\n---\n%s", out.String(), fromFile.String())
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-replays", "0"}, "flag -replays: 0 must be at least 1"},
		{[]string{"run", "-percentage-of-nodes-to-score", "101"}, "flag -percentage-of-nodes-to-score: 101 is outside 0..100"},
		{[]string{"run", "-holdout", "1"}, "flag -holdout: 1 is outside (0, 1)"},
		{[]string{"run", "-objective", "speed=1"}, "flag -objective:"},
		{[]string{"run", "-margin", "-1"}, "flag"},
		{[]string{"run", "-record=false", "-current", "/nonexistent.yaml", "-jobs", phillyJobs, "-nodes", phillyNodes}, "flag -current:"},
		{[]string{"explain", "no-such-profile"}, "not found"},
		{[]string{"import", "-origin", "yesterday", "-jobs", phillyJobs}, `flag -origin: "yesterday"`},
		{[]string{"fgd-table", "-trace-dir", "/nonexistent"}, "needs the Alibaba openb trace"},
		{[]string{"fgd-table", "-seeds", "9-1"}, "flag -seeds:"},
		{[]string{"fgd-table", "-policies", "clustering"}, "flag -policies:"},
		{[]string{"loop", "-interval", "0"}, "flag -interval: 0s must be positive"},
		{[]string{"loop"}, "flag -kubeconfig:"},
	} {
		if err := run(ctx, tc.args, getenv, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tuner %v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// A seeded run on the imported Philly slice, verified as stored; then the
// stored history changes under it and verify says which figures moved.
func TestRunThenVerify(t *testing.T) {
	ctx := context.Background()
	getenv := migrated(t)
	if err := run(ctx, []string{"import", "-quiet", "-jobs", phillyJobs, "-nodes", phillyNodes}, getenv, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	since := (time.Since(time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)) + time.Hour).Round(time.Hour).String()
	var out strings.Builder
	if err := run(ctx, []string{"run", "-quiet", "-name", "tuned-v", "-seed", "42", "-since", since, "-replays", "3", "-rounds", "1"},
		getenv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"inputs: seed 42; stored jobs created", "check: tuner verify tuned-v", "stored profile tuned-v"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(ctx, []string{"verify", "tuned-v"}, getenv, &out, io.Discard); err != nil {
		t.Fatalf("a freshly recorded profile does not verify: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "verdict: matches") {
		t.Errorf("verify printed:\n%s", out.String())
	}

	// The last ten jobs to arrive (held out) now ran three hours longer.
	s := storetest.Open(t, getenv("DATABASE_URL"))
	tag, err := s.Pool().Exec(ctx, `UPDATE jobs SET finished_at = finished_at + interval '3 hours'
		WHERE uid IN (SELECT uid FROM jobs ORDER BY created_at DESC, uid LIMIT 10)`)
	if err != nil || tag.RowsAffected() != 10 {
		t.Fatalf("alter history: %v (%d rows)", err, tag.RowsAffected())
	}
	out.Reset()
	err = run(ctx, []string{"verify", "tuned-v"}, getenv, &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "does not verify") || !strings.Contains(err.Error(), "held-out current mean_jct_s") {
		t.Errorf("verify after the history changed: err = %v", err)
	}
	if !strings.Contains(out.String(), "verdict: differs") || !strings.Contains(out.String(), "DIFFERS") {
		t.Errorf("verify printed:\n%s", out.String())
	}
}

// lineWith is the first line of s containing sub ("" when none does).
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}
