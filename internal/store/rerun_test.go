package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// A job outlives the eviction of its members: a gang whose members were
// all evicted while its group object exists waits for a new run and ends
// with it, keeping its first admission; a gang whose group object goes
// before a member was bound ends Deleted and has no JCT; a bare pod
// evicted ends with its eviction, since nothing replaces it.
func TestDeriveJobsAcrossEvictions(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	derive := func(uids ...string) {
		t.Helper()
		if err := s.DeriveJobs(ctx, uids); err != nil {
			t.Fatal(err)
		}
	}
	job := func(uid string) schedloop.Job {
		t.Helper()
		j, err := s.GetJob(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	member := func(uid, job string, created, bound, started, ended int, phase schedloop.Phase, evicted bool) schedloop.Pod {
		p := schedloop.Pod{UID: uid, Namespace: "ml", Name: uid, JobUID: job, GPUs: 1, Created: at(created), Phase: phase, Evicted: evicted}
		if bound >= 0 {
			p.Scheduled = at(bound)
		}
		if started >= 0 {
			p.Started = at(started)
		}
		if ended >= 0 {
			p.Finished = at(ended)
		}
		return p
	}
	gangs := []schedloop.Job{
		{UID: "g", Namespace: "ml", Name: "train", Kind: schedloop.JobKindGang, MinMember: 2, Created: at(0)},
		{UID: "never", Namespace: "ml", Name: "never", Kind: schedloop.JobKindGang, MinMember: 2, Created: at(0)},
	}
	if err := s.UpsertJobs(ctx, gangs); err != nil {
		t.Fatal(err)
	}
	// The gang's first run: admitted at minute 2, evicted at minute 5.
	// The other gang's members are evicted before either was bound.
	// The bare pod is evicted while running.
	if err := s.UpsertPods(ctx, []schedloop.Pod{
		member("g-0", "g", 0, 1, 1, 5, schedloop.PhaseDeleted, true),
		member("g-1", "g", 0, 2, 2, 5, schedloop.PhaseDeleted, true),
		member("never-0", "never", 0, -1, -1, 3, schedloop.PhaseDeleted, true),
		member("never-1", "never", 0, -1, -1, 3, schedloop.PhaseDeleted, true),
		member("bare", "bare", 0, 1, 1, 4, schedloop.PhaseDeleted, true),
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertJobs(ctx, []schedloop.Job{{UID: "bare", Namespace: "ml", Name: "bare", Kind: schedloop.JobKindPod,
		MinMember: 1, Created: at(0)}}); err != nil {
		t.Fatal(err)
	}
	derive("g", "never", "bare")
	for _, uid := range []string{"g", "never"} {
		if j := job(uid); !j.Finished.IsZero() || j.Phase != schedloop.PhasePending {
			t.Errorf("%s, every member evicted, group still there: phase %s finished %v; want Pending, not finished", uid, j.Phase, j.Finished)
		}
	}
	if j := job("bare"); !j.Finished.Equal(at(4)) || j.Phase != schedloop.PhaseDeleted {
		t.Errorf("bare pod evicted: phase %s finished %v; want Deleted at %v", j.Phase, j.Finished, at(4))
	}

	// The gang's second run ends at minute 20; the other gang's group is
	// deleted at minute 6.
	if err := s.UpsertPods(ctx, []schedloop.Pod{
		member("g-0-r1", "g", 5, 7, 8, -1, schedloop.PhaseRunning, false),
		member("g-1-r1", "g", 5, 7, 8, -1, schedloop.PhaseRunning, false),
	}); err != nil {
		t.Fatal(err)
	}
	derive("g")
	if j := job("g"); j.Phase != schedloop.PhaseRunning || !j.Finished.IsZero() {
		t.Errorf("gang rerunning: phase %s finished %v; want Running", j.Phase, j.Finished)
	}
	if err := s.UpsertPods(ctx, []schedloop.Pod{
		member("g-0-r1", "g", 5, 7, 8, 20, schedloop.PhaseSucceeded, false),
		member("g-1-r1", "g", 5, 7, 8, 20, schedloop.PhaseSucceeded, false),
	}); err != nil {
		t.Fatal(err)
	}
	deleted := gangs[1]
	deleted.Deleted = at(6)
	if err := s.UpsertJobs(ctx, []schedloop.Job{deleted}); err != nil {
		t.Fatal(err)
	}
	derive("g", "never")
	g := job("g")
	if g.Phase != schedloop.PhaseSucceeded || !g.Finished.Equal(at(20)) || !g.FirstScheduled.Equal(at(1)) || !g.Admitted.Equal(at(2)) {
		t.Errorf("gang after its rerun: phase %s, first bound %v, admitted %v, finished %v; want Succeeded, %v, %v, %v",
			g.Phase, g.FirstScheduled, g.Admitted, g.Finished, at(1), at(2), at(20))
	}
	// History reads when the gang's last run began: its run, once, took
	// 13 minutes (7..20), not the 18 since its first admission.
	hist, err := s.JobHistory(ctx, at(0), at(60))
	if err != nil {
		t.Fatal(err)
	}
	lastRun := map[string]time.Time{}
	for _, h := range hist {
		lastRun[h.UID] = h.LastRunBegan
	}
	if r, ok := lastRun["g"]; !ok || !r.Equal(at(7)) || len(lastRun) != 2 || !lastRun["bare"].IsZero() {
		t.Errorf("history's last runs %v: want the gang's at %v, the bare pod's (evicted, never rerun) none, and no other job", lastRun, at(7))
	}
	if j := job("never"); j.Phase != schedloop.PhaseDeleted || !j.Finished.Equal(at(6)) || !j.Deleted.Equal(at(6)) {
		t.Errorf("gang deleted unbound: phase %s finished %v deleted %v; want Deleted at %v", j.Phase, j.Finished, j.Deleted, at(6))
	}

	// JCT counts the gang once, from creation to its rerun's end, queueing
	// until its first admission; the gang that never ran has none.
	jcts, err := s.FinishedJobJCT(ctx, at(0), at(60))
	if err != nil {
		t.Fatal(err)
	}
	byUID := map[string]store.JobJCT{}
	for _, j := range jcts {
		byUID[j.UID] = j
	}
	if _, ok := byUID["never"]; ok {
		t.Error("a gang none of whose members was bound has a JCT")
	}
	if j := byUID["g"]; j.JCTSeconds != 1200 || j.QueueSeconds != 120 || j.RunSeconds != 1080 {
		t.Errorf("gang JCT %v = queue %v + run %v; want 1200 = 120 + 1080", j.JCTSeconds, j.QueueSeconds, j.RunSeconds)
	}
	sum, err := s.NamespaceJCT(ctx, "ml", at(0), 1000)
	if err != nil {
		t.Fatal(err)
	}
	// The gang (1200 s) and the bare pod, which ran until its eviction (240 s).
	if sum.Finished != 2 || sum.MeanJCTSeconds != 720 {
		t.Errorf("namespace summary: %d jobs, mean JCT %v; want 2, 720", sum.Finished, sum.MeanJCTSeconds)
	}
}
