package store_test

import (
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
)

// A replay's figures count only its namespace's jobs created since it began,
// take a job's priority from its pods when its row lacks it, and label GPU
// samples per scrape round.
func TestReplayReadBack(t *testing.T) {
	s := storeWithNode(t)
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	jobs := []schedloop.Job{
		// queue 10 s, JCT 110 s; priority 0 on the row, 1 on its pod.
		{UID: "j1", Namespace: "a", Name: "j1", Kind: schedloop.JobKindGang, MinMember: 1, Created: at(0), FirstScheduled: at(5), Admitted: at(10), Finished: at(110), Phase: schedloop.PhaseSucceeded},
		// queue 30 s (first binding, no admission), JCT 200 s, priority 1.
		{UID: "j2", Namespace: "a", Name: "j2", Kind: schedloop.JobKindGang, MinMember: 1, Priority: 1, Created: at(20), FirstScheduled: at(50), Finished: at(220), Phase: schedloop.PhaseSucceeded},
		// still running: counted, not finished.
		{UID: "j3", Namespace: "a", Name: "j3", Kind: schedloop.JobKindGang, MinMember: 1, Created: at(30), FirstScheduled: at(40)},
		// before the start, and in another namespace: neither counts.
		{UID: "j0", Namespace: "a", Name: "j0", Kind: schedloop.JobKindGang, MinMember: 1, Created: at(-100), FirstScheduled: at(-90), Finished: at(900), Phase: schedloop.PhaseSucceeded},
		{UID: "jb", Namespace: "b", Name: "jb", Kind: schedloop.JobKindGang, MinMember: 1, Priority: 1, Created: at(1), FirstScheduled: at(500), Finished: at(1000), Phase: schedloop.PhaseSucceeded},
	}
	if err := s.UpsertJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	pods := []schedloop.Pod{
		{UID: "p1", Namespace: "a", Name: "j1-0", JobUID: "j1", Priority: 1, Created: at(0), Scheduled: at(10), Finished: at(110)},
		// (p1 asks for no GPU, so it is no GPU demand.)
		// waits from before t0 to t0+2 s: one GPU of demand in round 0.
		{UID: "w1", Namespace: "a", Name: "w1", GPUs: 1, Created: at(-5), Scheduled: at(2)},
		// half a GPU waits from t0+1 s on: ceil(0.5) = one GPU in round 1.
		{UID: "half", Namespace: "a", Name: "half", GPUs: 1, GPUMilli: 500, Created: at(1)},
	}
	if err := s.UpsertPods(ctx, pods); err != nil {
		t.Fatal(err)
	}

	span, err := s.NamespaceJobSpan(ctx, "a", t0)
	if err != nil {
		t.Fatal(err)
	}
	if span.Jobs != 3 || span.Finished != 2 || !span.From.Equal(at(0)) || !span.To.Equal(at(220)) {
		t.Errorf("span = %+v, want 3 jobs, 2 finished, %v..%v", span, at(0), at(220))
	}
	empty, err := s.NamespaceJobSpan(ctx, "none", t0)
	if err != nil {
		t.Fatal(err)
	}
	if empty.Jobs != 0 || !empty.From.Equal(t0) || !empty.To.Equal(t0) {
		t.Errorf("empty span = %+v, want no jobs spanning the start", empty)
	}

	jct, err := s.NamespaceJCT(ctx, "a", t0, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := store.JCTSummary{Finished: 2, MeanJCTSeconds: 155, MeanQueueSeconds: 20, P95JCTSeconds: 200, HighPriorityJobs: 2, HighPriorityP95WaitSeconds: 30}
	if jct != want {
		t.Errorf("JCT = %+v, want %+v", jct, want)
	}
	if got := jct.QueueShare(); got != 20.0/155 {
		t.Errorf("queue share = %v, want 20/155", got)
	}
	if got := (store.JCTSummary{}).QueueShare(); got != 0 {
		t.Errorf("queue share without jobs = %v, want 0", got)
	}

	sample := func(sec int, gpu, pod string, active float64) schedloop.GPUSample {
		return schedloop.GPUSample{Time: at(sec), GPUUUID: gpu, Node: "n1", PodNamespace: "a", PodName: pod, GrEngineActive: active}
	}
	samples := []schedloop.GPUSample{
		// Round 0 (t0..t0+2 s): a busy (its highest reading), b held idle,
		// c free while w1 waits, d spare.
		sample(0, "GPU-a", "p", 0.9), sample(1, "GPU-a", "p", 0.01), sample(0, "GPU-b", "q", 0.01), sample(0, "GPU-c", "", 0), sample(0, "GPU-d", "", 0),
		// Round 1: a held idle, b busy, c free while half waits, d spare.
		sample(2, "GPU-a", "p", 0.01), sample(2, "GPU-b", "q", 0.9), sample(2, "GPU-c", "", 0), sample(3, "GPU-d", "", 0),
		// At the window's end: not counted.
		sample(4, "GPU-a", "p", 0.01),
	}
	if _, err := s.CopyGPUSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	idle, total, err := s.IdleSamplesByRound(ctx, at(0), at(4), 0.05, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if idle != 4 || total != 8 {
		t.Errorf("idle samples = %d of %d, want 4 of 8", idle, total)
	}
	if _, _, err := s.IdleSamplesByRound(ctx, at(0), at(4), 0.05, 0); err == nil {
		t.Error("a zero round was accepted")
	}
}
