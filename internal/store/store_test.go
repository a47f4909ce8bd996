package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

var ctx = context.Background()

var schemaTables = []string{"nodes", "gpus", "jobs", "pods", "scheduling_attempts", "k8s_events",
	"gpu_samples", "gpu_minutes", "profiles", "gpu_demand_minutes", "gpu_state_hours", "pod_wait_intervals",
	"pod_wait_breakdown", "job_jct"}

func tableExists(t *testing.T, s *store.Store, name string) bool {
	t.Helper()
	var ok bool
	if err := s.Pool().QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatalf("look up table %s: %v", name, err)
	}
	return ok
}

func TestMigrationsUpDownUp(t *testing.T) {
	s := storetest.Open(t, storetest.URL(t))

	before, err := s.MigrationStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.Current != 0 || before.Latest < 1 || len(before.Pending) != int(before.Latest) {
		t.Fatalf("empty database status = %+v, want current 0 and every version pending", before)
	}
	for round := 1; round <= 2; round++ {
		up, err := s.Migrate(ctx)
		if err != nil {
			t.Fatalf("round %d up: %v", round, err)
		}
		if up.Current != up.Latest {
			t.Fatalf("round %d: after up at %d, want latest %d", round, up.Current, up.Latest)
		}
		for _, tbl := range schemaTables {
			if !tableExists(t, s, tbl) {
				t.Errorf("round %d: table %s missing after up", round, tbl)
			}
		}
		down, err := s.MigrateDownTo(ctx, 0)
		if err != nil {
			t.Fatalf("round %d down: %v", round, err)
		}
		if down.Current != 0 {
			t.Fatalf("round %d: after down at %d, want 0", round, down.Current)
		}
		for _, tbl := range schemaTables {
			if tableExists(t, s, tbl) {
				t.Errorf("round %d: table %s still there after down", round, tbl)
			}
		}
	}
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatalf("final up: %v", err)
	}
	// Migrating an up-to-date database is a no-op, not an error.
	again, err := s.Migrate(ctx)
	if err != nil || again.Current != again.Latest {
		t.Fatalf("second migrate = %+v, %v", again, err)
	}
}

// Components starting together (collector, tuner, scheduler) migrate the
// same empty database at once: each migration is applied exactly once and
// every start-up ends with the current schema.
func TestConcurrentMigrationsApplyOnce(t *testing.T) {
	url := storetest.URL(t)
	stores := make([]*store.Store, 4)
	for i := range stores {
		stores[i] = storetest.Open(t, url)
	}
	errs := make(chan error, len(stores))
	for _, s := range stores {
		go func() {
			_, err := s.Migrate(ctx)
			errs <- err
		}()
	}
	for range stores {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	st, err := stores[0].MigrationStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Current != st.Latest || len(st.Pending) != 0 {
		t.Fatalf("after concurrent start-ups: %+v", st)
	}
	var applied, distinct int
	if err := stores[0].Pool().QueryRow(ctx, `SELECT count(*), count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0`).Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	if applied != distinct {
		t.Errorf("goose_db_version holds %d rows for %d versions: a migration ran twice", applied, distinct)
	}
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	s := storetest.New(t)
	if _, err := s.Pool().Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (999, true)`); err != nil {
		t.Fatal(err)
	}
	_, err := s.Migrate(ctx)
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("Migrate on a newer schema: err = %v, want ErrSchemaTooNew", err)
	}
	if !strings.Contains(err.Error(), "migration 999") {
		t.Errorf("error %q does not name the database's version 999", err)
	}
	if err := s.RequireCurrentSchema(ctx); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("RequireCurrentSchema on a newer schema: err = %v, want ErrSchemaTooNew", err)
	}
	if _, err := s.MigrateDownTo(ctx, 0); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Fatalf("MigrateDownTo on a newer schema: err = %v, want ErrSchemaTooNew", err)
	}
}

func TestOpenExplainsBadInput(t *testing.T) {
	good := storetest.URL(t)
	tests := []struct {
		name     string
		url      string
		want     string
		sentinel error
	}{
		{"not a url", "postgres://user:secret@[::1", "not a valid Postgres connection string", nil},
		{"unknown parameter", "postgres://127.0.0.1/x?sslmode=sometimes", "not a valid Postgres connection string", nil},
		{"nothing listening", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2", "nothing answered at 127.0.0.1:1", store.ErrUnreachable},
		{"missing database", strings.Replace(good, "schedloop_test_", "schedloop_absent_", 1), "does not exist", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := store.Open(ctx, tc.url, store.Options{ConnectTimeout: 3 * time.Second})
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded, want error containing %q", tc.url, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%q) error = %q, want it to contain %q", tc.url, err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error leaks the password: %q", err)
			}
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Errorf("error %v is not %v", err, tc.sentinel)
			}
		})
	}
}

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func TestNodesAndGPUsRoundTrip(t *testing.T) {
	s := storetest.New(t)
	nodes := []schedloop.Node{
		{Name: "gpu-a", Labels: map[string]string{"nvidia.com/gpu.product": "A100"},
			Topology: map[string]string{"rack": "r1", "nvlink": "d0"}, GPUModel: "A100", GPUCount: 8,
			CPUMilli: 96000, MemoryMiB: 1 << 20, Ready: true, FirstSeen: t0, LastSeen: t0.Add(time.Minute)},
		{Name: "gpu-b", GPUModel: "T4", GPUCount: 2, FirstSeen: t0, LastSeen: t0},
	}
	if err := s.UpsertNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	// A later observation moves last_seen forward but keeps first_seen.
	later := nodes[0]
	later.FirstSeen, later.LastSeen, later.Ready = t0.Add(time.Hour), t0.Add(time.Hour), false
	if err := s.UpsertNodes(ctx, []schedloop.Node{later}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []schedloop.Node{later, nodes[1]}
	want[0].FirstSeen = t0
	want[1].Labels, want[1].Topology = map[string]string{}, map[string]string{}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}

	gpus := []schedloop.GPU{
		{UUID: "GPU-1", Node: "gpu-a", Index: 0, Model: "A100", NVLinkDomain: "d0"},
		{UUID: "MIG-1a", Node: "gpu-a", Index: 1, Model: "A100", MIGProfile: "1g.10gb"},
		{UUID: "MIG-1b", Node: "gpu-a", Index: 1, Model: "A100", MIGProfile: "1g.10gb"},
	}
	if err := s.UpsertGPUs(ctx, gpus); err != nil {
		t.Fatal(err)
	}
	gotGPUs, err := s.ListGPUs(ctx, "gpu-a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(gpus, gotGPUs); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
	if err := s.UpsertGPUs(ctx, []schedloop.GPU{{UUID: "GPU-x", Node: "no-such-node"}}); err == nil {
		t.Error("a GPU on an unknown node was stored")
	}
}

func TestJobsAndPodsMergeObservations(t *testing.T) {
	s := storetest.New(t)
	job := schedloop.Job{UID: "pg-1", Namespace: "ml", Name: "llama", Kind: schedloop.JobKindGang, Queue: "research",
		Priority: 100, MinMember: 4, GPUsPerMember: 8, Created: t0, FirstScheduled: t0.Add(time.Minute),
		Phase: schedloop.PhasePending}
	if err := s.UpsertJobs(ctx, []schedloop.Job{job}); err != nil {
		t.Fatal(err)
	}
	// A re-list after a restart knows less (no first-scheduled time) but more
	// (admitted, finished); a late Running must not undo Succeeded.
	relist := job
	relist.FirstScheduled = time.Time{}
	relist.Admitted, relist.Started, relist.Finished = t0.Add(2*time.Minute), t0.Add(3*time.Minute), t0.Add(time.Hour)
	relist.Phase = schedloop.PhaseSucceeded
	late := job
	late.Phase = schedloop.PhaseRunning
	if err := s.UpsertJobs(ctx, []schedloop.Job{relist, late}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetJob(ctx, "pg-1")
	if err != nil {
		t.Fatal(err)
	}
	want := relist
	want.FirstScheduled = job.FirstScheduled
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("job (-want +got):\n%s", diff)
	}
	if _, err := s.GetJob(ctx, "absent"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetJob(absent) err = %v, want ErrNotFound", err)
	}
	if err := s.UpsertJobs(ctx, []schedloop.Job{{UID: "x", Name: "no-created"}}); err == nil || !strings.Contains(err.Error(), "created time is missing") {
		t.Errorf("job without created time: err = %v", err)
	}

	pod := schedloop.Pod{UID: "pod-1", Namespace: "ml", Name: "llama-0", JobUID: "pg-not-yet-seen", Queue: "research",
		Priority: 100, SchedulerName: "schedloop", GPUs: 8, Created: t0}
	if err := s.UpsertPods(ctx, []schedloop.Pod{pod}); err != nil {
		t.Fatalf("pod whose job is not stored yet: %v", err)
	}
	bound := pod
	bound.Node, bound.GPUUUIDs, bound.Scheduled, bound.Started = "gpu-a", []string{"GPU-1", "GPU-2"}, t0.Add(time.Minute), t0.Add(2*time.Minute)
	bound.Phase = schedloop.PhaseRunning
	if err := s.UpsertPods(ctx, []schedloop.Pod{bound}); err != nil {
		t.Fatal(err)
	}
	// An update without node/devices (e.g. from an event) keeps what is known.
	if err := s.UpsertPods(ctx, []schedloop.Pod{pod}); err != nil {
		t.Fatal(err)
	}
	gotPod, err := s.GetPod(ctx, "pod-1")
	if err != nil {
		t.Fatal(err)
	}
	wantPod := bound
	wantPod.Phase = schedloop.PhasePending // a non-terminal phase follows the latest observation
	if diff := cmp.Diff(wantPod, gotPod, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("pod (-want +got):\n%s", diff)
	}
}

func TestAttemptsAreDeduplicated(t *testing.T) {
	s := storetest.New(t)
	attempts := []schedloop.SchedulingAttempt{
		{Key: "ev-1/1", PodUID: "pod-1", At: t0, Result: schedloop.AttemptUnschedulable,
			Category: schedloop.WaitInsufficientGPU, TotalNodes: 64,
			Reasons: map[string]int{"Insufficient nvidia.com/gpu": 8, "node(s) didn't match pod topology": 56},
			Message: "0/64 nodes are available: 8 Insufficient nvidia.com/gpu, 56 node(s) didn't match pod topology."},
		{Key: "ev-1/2", PodUID: "pod-1", At: t0.Add(30 * time.Second), Result: schedloop.AttemptWaiting,
			Category: schedloop.WaitGangIncomplete, Reasons: map[string]int{}},
	}
	n, err := s.InsertAttempts(ctx, attempts)
	if err != nil || n != 2 {
		t.Fatalf("first insert = %d, %v; want 2 new", n, err)
	}
	n, err = s.InsertAttempts(ctx, attempts)
	if err != nil || n != 0 {
		t.Fatalf("replayed insert = %d, %v; want 0 new", n, err)
	}
	got, err := s.PodAttempts(ctx, "pod-1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(attempts, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	if _, err := s.InsertAttempts(ctx, []schedloop.SchedulingAttempt{{PodUID: "p"}}); err == nil {
		t.Error("an attempt without a key was accepted")
	}
}

func TestEventsFollowAggregation(t *testing.T) {
	s := storetest.New(t)
	ev := schedloop.Event{UID: "e1", Namespace: "ml", InvolvedKind: "Pod", InvolvedName: "llama-0", InvolvedUID: "pod-1",
		Reason: "FailedScheduling", Type: "Warning", Message: "0/4 nodes are available", Source: "default-scheduler",
		Count: 1, FirstSeen: t0, LastSeen: t0}
	repeat := ev
	repeat.Count, repeat.LastSeen, repeat.Message = 5, t0.Add(5*time.Minute), "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
	stale := ev // an old copy of the object arriving after the newer one
	if err := s.UpsertEvents(ctx, []schedloop.Event{ev, repeat}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertEvents(ctx, []schedloop.Event{stale}); err != nil {
		t.Fatal(err)
	}
	got, err := s.EventsFor(ctx, "pod-1")
	if err != nil {
		t.Fatal(err)
	}
	want := repeat
	want.Message = stale.Message // the message follows the last write; count and span never shrink
	if diff := cmp.Diff([]schedloop.Event{want}, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestProfilesLifecycle(t *testing.T) {
	s := storetest.New(t)
	first := schedloop.Profile{Name: "p-1", Weights: map[string]float64{"binpack": 3, "topology": 5},
		QueueLimits:        map[string]schedloop.QueueLimit{"research": {MaxGPUs: 64, MaxRunningGang: 4}},
		GangTimeoutSeconds: 300, Evidence: map[string]any{"replays": float64(8)},
		Predicted: map[string]float64{"idle_share": 0.12}}
	id1, err := s.InsertProfile(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	second := first
	second.Name, second.ParentID = "p-2", id1
	id2, err := s.InsertProfile(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertProfile(ctx, first); err == nil {
		t.Error("a second profile with the same name was stored")
	}
	if err := s.ApplyProfile(ctx, id1, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyProfile(ctx, id2, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	applied, err := s.ListProfiles(ctx, schedloop.ProfileApplied, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 1 || applied[0].ID != id2 || applied[0].ParentID != id1 || !applied[0].Applied.Equal(t0.Add(time.Hour)) {
		t.Fatalf("applied profiles = %+v, want only p-2 applied at t0+1h with parent %d", applied, id1)
	}
	p1, err := s.GetProfile(ctx, id1)
	if err != nil {
		t.Fatal(err)
	}
	if p1.Status != schedloop.ProfileSuperseded {
		t.Errorf("p-1 status = %s, want superseded", p1.Status)
	}
	if diff := cmp.Diff(first.QueueLimits, p1.QueueLimits); diff != "" {
		t.Errorf("queue limits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(first.Evidence, p1.Evidence); diff != "" {
		t.Errorf("evidence (-want +got):\n%s", diff)
	}
	if err := s.RecordMeasured(ctx, id2, map[string]float64{"idle_share": 0.2}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetProfileStatus(ctx, id2, schedloop.ProfileRolledBack, "idle share regressed 0.12 -> 0.20"); err != nil {
		t.Fatal(err)
	}
	p2, err := s.GetProfile(ctx, id2)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Status != schedloop.ProfileRolledBack || p2.Measured["idle_share"] != 0.2 || p2.Reason == "" {
		t.Errorf("p-2 after rollback = %+v", p2)
	}
	if err := s.ApplyProfile(ctx, 12345, t0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("apply unknown profile: err = %v, want ErrNotFound", err)
	}
	if _, err := s.GetProfile(ctx, 12345); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get unknown profile: err = %v, want ErrNotFound", err)
	}
}

func TestRedactHidesPasswords(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://u:secret@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://h/db", "postgres://h/db"},
		{"host=h password=secret", "<not a URL>"},
	}
	for _, tc := range tests {
		if got := store.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
