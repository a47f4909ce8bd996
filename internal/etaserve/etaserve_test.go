package etaserve

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	schedloop "github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/eta"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// seed stores two 8-GPU nodes, thirty finished runs of "train" that each
// ran exactly an hour, and, open now: train-a on n1 for 30 minutes,
// train-b on n2 for 50, and train-c waiting for 10.
func seed(t *testing.T) *store.Store {
	t.Helper()
	st := storetest.New(t)
	ctx := context.Background()
	var nodes []schedloop.Node
	for _, n := range []string{"n1", "n2"} {
		nodes = append(nodes, schedloop.Node{Name: n, GPUModel: "H100", GPUCount: 8, CPUMilli: 64000, MemoryMiB: 512000, Ready: true, FirstSeen: now.Add(-48 * time.Hour), LastSeen: now})
	}
	if err := st.UpsertNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	job := func(uid, name string, created time.Time) schedloop.Job {
		return schedloop.Job{UID: uid, Namespace: "ml", Name: name, Kind: schedloop.JobKindPod, Queue: "team", MinMember: 1, GPUsPerMember: 8,
			Created: created, Phase: schedloop.PhasePending}
	}
	var jobs []schedloop.Job
	var pods []schedloop.Pod
	for i := 0; i < 30; i++ {
		start := now.Add(-40*time.Hour + time.Duration(i)*time.Hour)
		j := job(fmt.Sprintf("done-%d", i), fmt.Sprintf("train-%d", i), start)
		j.FirstScheduled, j.Admitted, j.Started, j.Finished, j.Phase = start, start, start, start.Add(time.Hour), schedloop.PhaseSucceeded
		jobs = append(jobs, j)
	}
	for _, r := range []struct {
		uid, node string
		ran       time.Duration
	}{{"a", "n1", 30 * time.Minute}, {"b", "n2", 50 * time.Minute}} {
		start := now.Add(-r.ran)
		j := job(r.uid, "train-"+r.uid, start)
		j.FirstScheduled, j.Admitted, j.Started, j.Phase = start, start, start, schedloop.PhaseRunning
		jobs = append(jobs, j)
		pods = append(pods, schedloop.Pod{UID: "pod-" + r.uid, Namespace: "ml", Name: "train-" + r.uid, JobUID: r.uid, Queue: "team", GPUs: 8,
			Node: r.node, Created: start, Scheduled: start, Started: start, Phase: schedloop.PhaseRunning})
	}
	jobs = append(jobs, job("c", "train-c", now.Add(-10*time.Minute)))
	if err := st.UpsertJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertPods(ctx, pods); err != nil {
		t.Fatal(err)
	}
	return st
}

func service(st *store.Store) *Service {
	return &Service{Store: st, Now: func() time.Time { return now }, Seed: 1}
}

func wait(t *testing.T, j JobETA) time.Duration {
	t.Helper()
	if j.State != eta.Starts || j.WaitP50Secs == nil {
		t.Fatalf("%s: %s (%s), want a start", j.Name, j.State, j.Reason)
	}
	return time.Duration(math.Round(*j.WaitP50Secs)) * time.Second
}

// The pending job waits for the running job that ends first: train-b,
// predicted (from thirty hour-long runs) to end in ten minutes.
func TestPendingFromTheStore(t *testing.T) {
	a, err := service(seed(t)).Pending(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if a.Running != 2 || len(a.Jobs) != 1 || a.ErrorSamples != 30 {
		t.Fatalf("answer: %d running, %d pending, %d error samples; want 2, 1, 30", a.Running, len(a.Jobs), a.ErrorSamples)
	}
	c := a.Jobs[0]
	if got := wait(t, c); got != 10*time.Minute {
		t.Errorf("train-c: wait %v, want 10m", got)
	}
	if c.UID != "c" || strings.Join(c.Nodes, ",") != "n2" || strings.Join(c.WaitsFor, ",") != "ml/train-b" || c.PredictedRunSecs != 3600 {
		t.Errorf("train-c: %+v, want uid c on n2, waiting for ml/train-b, predicted 3600 s", c)
	}
	if !c.P50.Equal(now.Add(10 * time.Minute)) {
		t.Errorf("train-c p50 at %v, want %v", c.P50, now.Add(10*time.Minute))
	}
}

func TestWhatIf(t *testing.T) {
	st := seed(t)
	ctx := context.Background()
	s := service(st)
	drained, err := s.WhatIf(ctx, Change{Drain: []string{"n2"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := wait(t, drained.Jobs[0]); got != 30*time.Minute {
		t.Errorf("n2 drained: train-c waits %v, want 30m (for train-a on n1)", got)
	}
	limited, err := s.WhatIf(ctx, Change{QueueLimits: map[string]scoring.QueueLimit{"team": {MaxGPUs: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := wait(t, limited.Jobs[0]); got != 30*time.Minute {
		t.Errorf("team limited to 8 GPUs: train-c waits %v, want 30m (until the queue holds nothing)", got)
	}
	huge := schedloop.Job{UID: "whatif", Namespace: "ml", Name: "huge", Kind: schedloop.JobKindPod, Queue: "team", MinMember: 1, GPUsPerMember: 16}
	never, err := s.WhatIf(ctx, Change{Add: &huge})
	if err != nil {
		t.Fatal(err)
	}
	if len(never.Jobs) != 1 || never.Jobs[0].State != eta.NeverFits || !strings.Contains(never.Jobs[0].Reason, "needs 1 pods of 16 GPUs") {
		t.Errorf("a 16-GPU pod on 8-GPU nodes: %+v, want never-fits with the reason", never.Jobs)
	}
	// Asking wrote nothing.
	open, err := st.OpenJobs(ctx, now.Add(-DefaultHistory))
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 3 {
		t.Errorf("%d open jobs after the what-ifs, want the 3 stored", len(open))
	}
}

// The predictor and its error model are learned once per set of finished
// jobs: a second estimate over the same history reuses them and answers
// the same, and a job ending relearns them.
func TestModelKeptUntilTheHistoryChanges(t *testing.T) {
	st := seed(t)
	ctx := context.Background()
	s := service(st)
	first, err := s.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.modelBuilds != 1 {
		t.Fatalf("two estimates over one history learned %d models, want 1", s.modelBuilds)
	}
	if !reflect.DeepEqual(first, again) {
		t.Errorf("the kept model answered %+v, the first %+v", again, first)
	}
	start := now.Add(-3 * time.Hour)
	ended := schedloop.Job{UID: "done-late", Namespace: "ml", Name: "train-late", Kind: schedloop.JobKindPod, Queue: "team", MinMember: 1, GPUsPerMember: 8,
		Created: start, FirstScheduled: start, Admitted: start, Started: start, Finished: start.Add(2 * time.Hour), Phase: schedloop.PhaseSucceeded}
	if err := st.UpsertJobs(ctx, []schedloop.Job{ended}); err != nil {
		t.Fatal(err)
	}
	changed, err := s.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.modelBuilds != 2 || changed.ErrorSamples != 31 {
		t.Errorf("after a job ended: %d models learned, %d error samples; want 2 and 31", s.modelBuilds, changed.ErrorSamples)
	}
}
