package store_test

import (
	"math"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

func TestIdleCategoriesAddUp(t *testing.T) {
	s := storeWithNode(t)
	m0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	m := func(i int) time.Time { return m0.Add(time.Duration(i) * time.Minute) }
	var samples []schedloop.GPUSample
	for i := 0; i < 3; i++ {
		active := 0.9
		if i == 2 {
			active = 0.01
		}
		samples = append(samples,
			schedloop.GPUSample{Time: m(i), GPUUUID: "GPU-a", Node: "n1", PodNamespace: "ml", PodName: "p1", GrEngineActive: active},
			schedloop.GPUSample{Time: m(i), GPUUUID: "GPU-b", Node: "n1"},
			schedloop.GPUSample{Time: m(i), GPUUUID: "GPU-c", Node: "n1"})
	}
	if _, err := s.CopyGPUSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	// p1 runs throughout; p2 waits from minute 1 on; p3 (2 GPUs) waits in minute 1 only.
	pods := []schedloop.Pod{
		{UID: "p1", Namespace: "ml", Name: "p1", GPUs: 1, Created: m(-60), Scheduled: m(-30)},
		{UID: "p2", Namespace: "ml", Name: "p2", GPUs: 1, Created: m(0).Add(30 * time.Second)},
		{UID: "p3", Namespace: "ml", Name: "p3", GPUs: 2, Created: m(1), Scheduled: m(2)},
		{UID: "cpu", Namespace: "ml", Name: "cpu", Created: m(0)},
	}
	if err := s.UpsertPods(ctx, pods); err != nil {
		t.Fatal(err)
	}
	for step, f := range []func() error{
		func() error { _, err := s.RollupGPUMinutes(ctx, m(0), m(3)); return err },
		func() error { return s.RollupDemand(ctx, m(0), m(3)) },
		func() error { return s.RollupStates(ctx, m(0), m(3), 0.05) },
		// Rolling up again must give the same totals, not double them.
		func() error { return s.RollupStates(ctx, m(0), m(3), 0.05) },
	} {
		if err := f(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	got, err := s.GPUIdleBreakdown(ctx, m0.Truncate(time.Hour), m0.Truncate(time.Hour).Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Minute 0: b, c spare. Minute 1: 3 GPUs of demand wait, so b and c are
	// unallocated-waiting. Minute 2: 1 GPU waits: b waiting, c spare.
	want := store.IdleBreakdown{BusyMinutes: 2, AllocatedIdleMinutes: 1, UnallocatedWaitingMinutes: 3, SpareMinutes: 3}
	if got != want {
		t.Fatalf("breakdown = %+v, want %+v", got, want)
	}
	if share := got.IdleShare(); math.Abs(share-4.0/9) > 1e-9 {
		t.Errorf("idle share = %v, want 4/9", share)
	}
}

func TestWaitBreakdownAndJCT(t *testing.T) {
	s := storeWithNode(t)
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	if err := s.UpsertPods(ctx, []schedloop.Pod{{UID: "p", Namespace: "ml", Name: "p", GPUs: 8, Created: t0, Scheduled: at(100), Finished: at(1000)}}); err != nil {
		t.Fatal(err)
	}
	attempts := []schedloop.SchedulingAttempt{
		{Key: "e1/1", PodUID: "p", At: at(10), Result: schedloop.AttemptUnschedulable, Category: schedloop.WaitInsufficientGPU},
		{Key: "e2/1", PodUID: "p", At: at(70), Result: schedloop.AttemptWaiting, Category: schedloop.WaitGangIncomplete},
		{Key: "e3/1", PodUID: "p", At: at(100), Result: schedloop.AttemptScheduled},
	}
	if _, err := s.InsertAttempts(ctx, attempts); err != nil {
		t.Fatal(err)
	}
	got, err := s.PodWaitBreakdown(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"not_attempted": 10, "insufficient_gpu": 60, "gang_incomplete": 30}
	if len(got) != len(want) {
		t.Fatalf("breakdown = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("breakdown[%s] = %v, want %v", k, got[k], v)
		}
	}
	job := schedloop.Job{UID: "j", Namespace: "ml", Name: "j", Kind: schedloop.JobKindGang, MinMember: 2, Created: t0,
		FirstScheduled: at(90), Admitted: at(100), Finished: at(1000), Phase: schedloop.PhaseSucceeded}
	if err := s.UpsertJobs(ctx, []schedloop.Job{job}); err != nil {
		t.Fatal(err)
	}
	jcts, err := s.FinishedJobJCT(ctx, t0, at(2000))
	if err != nil {
		t.Fatal(err)
	}
	if len(jcts) != 1 || jcts[0].QueueSeconds != 100 || jcts[0].RunSeconds != 900 || jcts[0].JCTSeconds != 1000 {
		t.Errorf("JCT = %+v, want queue 100 + run 900 = 1000", jcts)
	}
}

// storeWithNode is a migrated store whose inventory has node n1 (A100).
func storeWithNode(t *testing.T) *store.Store {
	s := storetest.New(t)
	if err := s.UpsertNodes(ctx, []schedloop.Node{{Name: "n1", GPUModel: "A100", GPUCount: 3}}); err != nil {
		t.Fatal(err)
	}
	return s
}

// The scheduler can try a pod before the watcher sees it, so its first
// attempt's microsecond time can precede the pod's refined creation time;
// the wait from creation is still that attempt's reason, not "not yet
// attempted".
func TestWaitAttemptBeforeRefinedCreation(t *testing.T) {
	s := storeWithNode(t)
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	at := func(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }
	if err := s.UpsertPods(ctx, []schedloop.Pod{{UID: "p", Namespace: "ml", Name: "p", GPUs: 8, Created: at(0.5), Scheduled: at(60), Finished: at(100)}}); err != nil {
		t.Fatal(err)
	}
	attempts := []schedloop.SchedulingAttempt{
		{Key: "e1/1", PodUID: "p", At: at(0.2), Result: schedloop.AttemptUnschedulable, Category: schedloop.WaitInsufficientGPU},
		{Key: "e1/2", PodUID: "p", At: at(59.5), Result: schedloop.AttemptUnschedulable, Category: schedloop.WaitInsufficientGPU},
	}
	if _, err := s.InsertAttempts(ctx, attempts); err != nil {
		t.Fatal(err)
	}
	got, err := s.PodWaitBreakdown(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || math.Abs(got[string(schedloop.WaitInsufficientGPU)]-59.5) > 1e-6 {
		t.Errorf("breakdown = %v, want all 59.5 s %s", got, schedloop.WaitInsufficientGPU)
	}
}

// TestQuotaDemandApart: the same cluster as TestIdleCategoriesAddUp, but p2
// belongs to a job whose Kueue Workload holds no quota reservation: its GPU
// waits for quota, not capacity, so in minute 2 (p3 bound) the free GPUs
// are spare, and one of them is counted free while quota waited.
func TestQuotaDemandApart(t *testing.T) {
	s := storeWithNode(t)
	m0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	m := func(i int) time.Time { return m0.Add(time.Duration(i) * time.Minute) }
	var samples []schedloop.GPUSample
	for i := 0; i < 3; i++ {
		samples = append(samples,
			schedloop.GPUSample{Time: m(i), GPUUUID: "GPU-a", Node: "n1", PodNamespace: "ml", PodName: "p1", GrEngineActive: 0.9},
			schedloop.GPUSample{Time: m(i), GPUUUID: "GPU-b", Node: "n1"},
			schedloop.GPUSample{Time: m(i), GPUUUID: "GPU-c", Node: "n1"})
	}
	if _, err := s.CopyGPUSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertJobs(ctx, []schedloop.Job{{UID: "j-train", Kind: schedloop.JobKindGang, Namespace: "ml", Name: "train", Created: m(0), MinMember: 1, GPUsPerMember: 1}}); err != nil {
		t.Fatal(err)
	}
	pods := []schedloop.Pod{
		{UID: "p1", Namespace: "ml", Name: "p1", GPUs: 1, Created: m(-60), Scheduled: m(-30)},
		{UID: "p2", Namespace: "ml", Name: "train-0", JobUID: "j-train", GPUs: 1, Created: m(0).Add(30 * time.Second)},
		{UID: "p3", Namespace: "ml", Name: "p3", GPUs: 2, Created: m(1), Scheduled: m(2)},
	}
	if err := s.UpsertPods(ctx, pods); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertKueueWorkloads(ctx, []schedloop.KueueWorkload{{UID: "wl-train", Namespace: "ml", Name: "train", LocalQueue: "team-a",
		CreatedAt: m(0), Conditions: []schedloop.KueueCondition{{Type: "QuotaReserved", Status: "False", Reason: "WaitingForQuota",
			At: m(0).Add(31 * time.Second), Category: schedloop.WaitQuota}}}}); err != nil {
		t.Fatal(err)
	}
	for step, f := range []func() error{
		func() error { _, err := s.RollupGPUMinutes(ctx, m(0), m(3)); return err },
		func() error { return s.RollupDemand(ctx, m(0), m(3)) },
		func() error { return s.RollupStates(ctx, m(0), m(3), 0.05) },
	} {
		if err := f(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	got, err := s.GPUIdleBreakdown(ctx, m0.Truncate(time.Hour), m0.Truncate(time.Hour).Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Minute 1: p3's 2 GPUs wait for capacity: b and c unallocated-waiting.
	// Minute 2: only p2 waits, for quota: b and c spare.
	want := store.IdleBreakdown{BusyMinutes: 3, UnallocatedWaitingMinutes: 2, SpareMinutes: 4}
	if got != want {
		t.Fatalf("breakdown = %+v, want %+v", got, want)
	}
	quota, err := s.QuotaWaitGPUMinutes(ctx, m(0), m(3))
	if err != nil {
		t.Fatal(err)
	}
	// Minute 1: both free GPUs are capacity's. Minute 2: one of the two free
	// GPUs waits for p2's quota.
	if quota != 1 {
		t.Errorf("GPU-minutes free while quota waited = %v, want 1", quota)
	}

	// Once the reservation is observed, p2 waits for capacity again.
	if err := s.UpsertKueueWorkloads(ctx, []schedloop.KueueWorkload{{UID: "wl-train", Namespace: "ml", Name: "train", LocalQueue: "team-a",
		CreatedAt: m(0), Conditions: []schedloop.KueueCondition{{Type: "QuotaReserved", Status: "True", Reason: "QuotaReserved", At: m(1).Add(10 * time.Second)}}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.RollupDemand(ctx, m(0), m(3)); err != nil {
		t.Fatal(err)
	}
	if quota, err := s.QuotaWaitGPUMinutes(ctx, m(0), m(3)); err != nil || quota != 0 {
		t.Errorf("after reservation at 1:10, quota GPU-minutes = %v (%v), want 0", quota, err)
	}
}
