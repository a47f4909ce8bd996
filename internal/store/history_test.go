package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

func TestImportJobsAndReadHistory(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var jobs []schedloop.Job
	for i, name := range []string{"a", "b", "c"} {
		at := t0.Add(time.Duration(i) * time.Hour)
		jobs = append(jobs, schedloop.Job{UID: "trace/" + name, Namespace: "trace", Name: name, Kind: schedloop.JobKindGang,
			Queue: "q", Priority: int32(i), MinMember: 2, GPUsPerMember: 4, Created: at, Admitted: at.Add(time.Minute),
			Started: at.Add(time.Minute), Finished: at.Add(30 * time.Minute), Phase: schedloop.PhaseSucceeded})
	}
	jobs = append(jobs, schedloop.Job{UID: "trace/pending", Name: "pending", Created: t0.Add(time.Hour)})
	n, err := s.ImportJobs(ctx, jobs)
	if err != nil || n != 4 {
		t.Fatalf("ImportJobs = %d, %v; want 4 new", n, err)
	}
	if n, err := s.ImportJobs(ctx, jobs); err != nil || n != 0 {
		t.Fatalf("a second import added %d (%v), want 0", n, err)
	}
	if _, err := s.ImportJobs(ctx, []schedloop.Job{{Name: "nameless"}}); err == nil {
		t.Error("a job without a UID was imported")
	}
	got, err := s.JobHistory(ctx, t0, t0.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("history = %+v, want a and b (c is later, pending never ran)", got)
	}
	if g := got[1]; g.MinMember != 2 || g.GPUsPerMember != 4 || g.Priority != 1 || !g.Finished.Equal(t0.Add(90*time.Minute)) {
		t.Errorf("job b read back as %+v", g)
	}
}

func TestProfileByNameAndApplied(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	if _, err := s.AppliedProfile(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AppliedProfile on an empty store: %v", err)
	}
	id, err := s.InsertProfile(ctx, schedloop.Profile{Name: "p1", Weights: map[string]float64{"bestfit": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyProfile(ctx, id, time.Now()); err != nil {
		t.Fatal(err)
	}
	p, err := s.GetProfileByName(ctx, "p1")
	if err != nil || p.ID != id {
		t.Fatalf("GetProfileByName = %+v, %v", p, err)
	}
	a, err := s.AppliedProfile(ctx)
	if err != nil || a.ID != id || a.Status != schedloop.ProfileApplied {
		t.Fatalf("AppliedProfile = %+v, %v", a, err)
	}
	if _, err := s.GetProfileByName(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing profile: %v", err)
	}
}
