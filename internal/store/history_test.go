package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// TestGangSizeBounded: a gang recorded with a billion members (a PodGroup
// created before the CRD had its maximum, or an old row) is read and written
// as schedloop.MaxGangMembers, so the tuner's replay of it stays bounded.
func TestGangSizeBounded(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	huge := schedloop.Job{UID: "ns/huge", Namespace: "ns", Name: "huge", Kind: schedloop.JobKindGang, MinMember: 1_000_000_000,
		GPUsPerMember: 8, Created: at, Admitted: at.Add(time.Minute), Started: at.Add(time.Minute)}
	if err := s.UpsertJobs(ctx, []schedloop.Job{huge}); err != nil {
		t.Fatal(err)
	}
	huge.UID, huge.Name = "ns/imported", "imported"
	if _, err := s.ImportJobs(ctx, []schedloop.Job{huge}); err != nil {
		t.Fatal(err)
	}
	// A row already stored unbounded, as an older release wrote it.
	old := huge
	old.UID, old.Name = "ns/old", "old"
	if err := s.UpsertJobs(ctx, []schedloop.Job{old}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET min_member = 1000000000 WHERE uid = 'ns/old'`); err != nil {
		t.Fatal(err)
	}
	got, err := s.JobHistory(ctx, at, at.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("history has %d jobs, want 3", len(got))
	}
	for _, j := range got {
		if j.MinMember != schedloop.MaxGangMembers {
			t.Errorf("job %s read back with %d members, want %d", j.UID, j.MinMember, schedloop.MaxGangMembers)
		}
	}
}

// TestImportTraceIsOneTransaction: a job Postgres refuses after the first
// chunk leaves no node and no job of the import stored.
func TestImportTraceIsOneTransaction(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var jobs []schedloop.Job
	for i := range 10_001 {
		name := fmt.Sprintf("j%d", i)
		jobs = append(jobs, schedloop.Job{UID: "t/" + name, Namespace: "t", Name: name, Created: at})
	}
	jobs = append(jobs, schedloop.Job{UID: "t/bad", Namespace: "t", Name: "bad", Created: at, GPUMilliPerMember: 5000})
	nodes := []schedloop.Node{{Name: "n1", GPUModel: "A100", GPUCount: 8}}
	if _, err := s.ImportTrace(ctx, nodes, jobs, nil); err == nil || !strings.Contains(err.Error(), "nothing stored") {
		t.Fatalf("ImportTrace = %v, want a refusal that says nothing was stored", err)
	}
	if got, _ := s.ListNodes(ctx); len(got) != 0 {
		t.Errorf("%d nodes stored by a refused import", len(got))
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d jobs stored by a refused import (%v)", n, err)
	}
}

// TestProfileNamesRefuseControlCharacters: a name with a newline or an
// escape sequence would forge log lines and rewrite terminals.
func TestProfileNamesRefuseControlCharacters(t *testing.T) {
	s := storetest.New(t)
	for _, name := range []string{"a\nb", "tuned\x1b[2J", "bad\xff", strings.Repeat("n", 254), ""} {
		if _, err := s.InsertProfile(context.Background(), schedloop.Profile{Name: name}); err == nil || !strings.Contains(err.Error(), "field name") {
			t.Errorf("InsertProfile(%q) = %v, want a refusal naming the field", name, err)
		}
	}
	if _, err := s.InsertProfile(context.Background(), schedloop.Profile{Name: "tuned-2026-12-04 é"}); err != nil {
		t.Errorf("a plain name was refused: %v", err)
	}
}
