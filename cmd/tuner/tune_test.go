package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/store/storetest"
	"github.com/schedloop/schedloop/internal/tuner"
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
	for _, want := range []string{"profile tuned-a (from default)", "held-out days:", "stored profile tuned-a", "wrote KubeSchedulerConfiguration"} {
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

func TestCheckAppliedRollsBack(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	applied := t0.Add(48 * time.Hour)
	// Before the profile: jobs finish in 10 minutes; after it: in an hour.
	var jobs []schedloop.Job
	for i := 0; i < 40; i++ {
		at := t0.Add(time.Duration(i) * 2 * time.Hour)
		run := 10 * time.Minute
		if at.After(applied) {
			run = time.Hour
		}
		jobs = append(jobs, schedloop.Job{UID: "j" + string(rune('A'+i)), Name: "j", Kind: schedloop.JobKindPod, MinMember: 1,
			GPUsPerMember: 1, Created: at, Admitted: at.Add(time.Minute), Finished: at.Add(run), Phase: schedloop.PhaseSucceeded})
	}
	if _, err := s.ImportJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	parent := profile.Default().ToDomain()
	parentID, err := s.InsertProfile(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	child := tuner.Candidate{Params: scoring.Params{Weights: scoring.Weights{"bestfit": 3}}}.Document("tuned-bad").ToDomain()
	child.ParentID = parentID
	childID, err := s.InsertProfile(ctx, child)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyProfile(ctx, childID, applied); err != nil {
		t.Fatal(err)
	}
	f := &tuneFlags{highPriority: 1}
	var out strings.Builder
	now := applied.Add(30 * time.Hour)
	settled, err := checkApplied(ctx, s, nil, f, tuner.DefaultObjective(), tuner.DefaultGuardrails(), now, 24*time.Hour, &out)
	if err != nil {
		t.Fatal(err)
	}
	if settled {
		t.Error("the pass that rolled back may tune")
	}
	got, err := s.GetProfile(ctx, childID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != schedloop.ProfileRolledBack || got.Measured["regression"] <= 0.05 || !strings.Contains(out.String(), "rolled back tuned-bad to default") {
		t.Errorf("after a regression: status %s, measured %v, output %q", got.Status, got.Measured, out.String())
	}
	if p, err := s.AppliedProfile(ctx); err != nil || p.ID != parentID {
		t.Errorf("applied profile is %+v (%v), want the parent", p, err)
	}
}
