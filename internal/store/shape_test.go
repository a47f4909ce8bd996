package store_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// A job's request shape (CPU, memory, GPU models per member) survives every
// way into the store and back out.
func TestRequestShapeRoundTrips(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	shaped := schedloop.Job{UID: "trace/shaped", Namespace: "trace", Name: "shaped", Kind: schedloop.JobKindGang,
		MinMember: 2, GPUsPerMember: 1, GPUMilliPerMember: 500, CPUMilliPerMember: 6000, MemoryMiBPerMember: 12288,
		GPUModels: []string{"V100M16", "V100M32"}, Created: t0, Admitted: t0.Add(time.Minute),
		Finished: t0.Add(time.Hour), Phase: schedloop.PhaseSucceeded}
	plain := schedloop.Job{UID: "trace/plain", Namespace: "trace", Name: "plain", Kind: schedloop.JobKindPod, MinMember: 1,
		GPUsPerMember: 2, Created: t0.Add(time.Second), Admitted: t0.Add(time.Minute), Phase: schedloop.PhaseRunning}
	if _, err := s.ImportJobs(ctx, []schedloop.Job{shaped, plain}); err != nil {
		t.Fatal(err)
	}
	got, err := s.JobHistory(ctx, t0, t0.Add(time.Hour))
	if err != nil || len(got) != 2 {
		t.Fatalf("JobHistory = %+v, %v", got, err)
	}
	for i, want := range []schedloop.Job{shaped, plain} {
		g := got[i]
		if g.CPUMilliPerMember != want.CPUMilliPerMember || g.MemoryMiBPerMember != want.MemoryMiBPerMember ||
			!reflect.DeepEqual(g.GPUModels, want.GPUModels) || g.GPUMilliPerMember != want.GPUMilliPerMember {
			t.Errorf("imported %s read back as cpu %d mem %d models %v milli %d", want.Name, g.CPUMilliPerMember,
				g.MemoryMiBPerMember, g.GPUModels, g.GPUMilliPerMember)
		}
	}

	// UpsertJobs writes the shape; a later observation that knows none (a
	// PodGroup) keeps it.
	up := shaped
	up.UID, up.Name = "live/shaped", "shaped-live"
	if err := s.UpsertJobs(ctx, []schedloop.Job{up}); err != nil {
		t.Fatal(err)
	}
	bare := up
	bare.CPUMilliPerMember, bare.MemoryMiBPerMember, bare.GPUModels = 0, 0, nil
	if err := s.UpsertJobs(ctx, []schedloop.Job{bare}); err != nil {
		t.Fatal(err)
	}
	j, err := s.GetJob(ctx, up.UID)
	if err != nil {
		t.Fatal(err)
	}
	if j.CPUMilliPerMember != 6000 || j.MemoryMiBPerMember != 12288 || !reflect.DeepEqual(j.GPUModels, up.GPUModels) {
		t.Errorf("after a shapeless upsert: cpu %d mem %d models %v", j.CPUMilliPerMember, j.MemoryMiBPerMember, j.GPUModels)
	}
}

// Pods carry their requests; DeriveJobs gives a gang the shape its members
// carry, and leaves a job whose members carry none as it was.
func TestPodShapeAndDerivedJobShape(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	gang := schedloop.Job{UID: "g1", Namespace: "ml", Name: "train", Kind: schedloop.JobKindGang, MinMember: 2,
		GPUsPerMember: 4, Created: t0}
	old := schedloop.Job{UID: "g2", Namespace: "ml", Name: "old", Kind: schedloop.JobKindGang, MinMember: 1,
		GPUsPerMember: 1, CPUMilliPerMember: 1000, Created: t0}
	if err := s.UpsertJobs(ctx, []schedloop.Job{gang, old}); err != nil {
		t.Fatal(err)
	}
	pods := []schedloop.Pod{
		{UID: "p1", Namespace: "ml", Name: "train-0", JobUID: "g1", GPUs: 4, CPUMilli: 16000, MemoryMiB: 65536,
			GPUModels: []string{"A100"}, Created: t0, Scheduled: t0.Add(time.Second), Phase: schedloop.PhaseRunning},
		{UID: "p2", Namespace: "ml", Name: "train-1", JobUID: "g1", GPUs: 4, CPUMilli: 16000, MemoryMiB: 65536,
			GPUModels: []string{"A100"}, Created: t0, Scheduled: t0.Add(2 * time.Second), Phase: schedloop.PhaseRunning},
		// A pod stored before pods carried requests.
		{UID: "p3", Namespace: "ml", Name: "old-0", JobUID: "g2", GPUs: 1, Created: t0, Phase: schedloop.PhasePending},
	}
	if err := s.UpsertPods(ctx, pods); err != nil {
		t.Fatal(err)
	}
	p, err := s.GetPod(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	if p.CPUMilli != 16000 || p.MemoryMiB != 65536 || !reflect.DeepEqual(p.GPUModels, []string{"A100"}) {
		t.Errorf("pod read back as cpu %d mem %d models %v", p.CPUMilli, p.MemoryMiB, p.GPUModels)
	}
	if err := s.DeriveJobs(ctx, []string{"g1", "g2"}); err != nil {
		t.Fatal(err)
	}
	g, err := s.GetJob(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if g.CPUMilliPerMember != 16000 || g.MemoryMiBPerMember != 65536 || !reflect.DeepEqual(g.GPUModels, []string{"A100"}) {
		t.Errorf("derived gang shape: cpu %d mem %d models %v", g.CPUMilliPerMember, g.MemoryMiBPerMember, g.GPUModels)
	}
	if g.Admitted.IsZero() {
		t.Error("derived gang not admitted after two members bound")
	}
	o, err := s.GetJob(ctx, "g2")
	if err != nil {
		t.Fatal(err)
	}
	if o.CPUMilliPerMember != 1000 || o.MemoryMiBPerMember != 0 || o.GPUModels != nil {
		t.Errorf("job whose members carry no shape changed: cpu %d mem %d models %v", o.CPUMilliPerMember,
			o.MemoryMiBPerMember, o.GPUModels)
	}
}

// A PodGroup seen without its pods is written with priority 0 and no GPUs;
// DeriveJobs must take both from the members, or every gang's priority is lost.
func TestDerivedJobTakesPriorityAndGPUsFromMembers(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	t0 := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	pods := []schedloop.Pod{
		{UID: "p1", Namespace: "ml", Name: "hi-0", JobUID: "g1", Priority: 1000, GPUs: 8, Created: t0},
		{UID: "p2", Namespace: "ml", Name: "hi-1", JobUID: "g1", Priority: 1000, GPUs: 8, Created: t0},
	}
	if err := s.UpsertPods(ctx, pods); err != nil {
		t.Fatal(err)
	}
	group := schedloop.Job{UID: "g1", Namespace: "ml", Name: "hi", Kind: schedloop.JobKindGang, MinMember: 2, Created: t0}
	if err := s.UpsertJobs(ctx, []schedloop.Job{group}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeriveJobs(ctx, []string{"g1"}); err != nil {
		t.Fatal(err)
	}
	j, err := s.GetJob(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if j.Priority != 1000 || j.GPUsPerMember != 8 {
		t.Errorf("derived gang: priority %d, GPUs per member %d; want 1000 and 8", j.Priority, j.GPUsPerMember)
	}
}
