package lifecycle_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/store/storetest"
	"github.com/schedloop/schedloop/internal/tuner"
	"github.com/schedloop/schedloop/internal/tuner/lifecycle"
)

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
	var out strings.Builder
	l := &lifecycle.Lifecycle{Store: s, Out: &out}
	now := applied.Add(30 * time.Hour)
	settled, err := l.CheckApplied(ctx, tuner.DefaultObjective(), tuner.DefaultGuardrails(), 1, now, 24*time.Hour)
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
