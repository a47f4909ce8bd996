package etaserve

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	schedloop "github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// BenchmarkPendingUnchangedHistory is the collector's scheduled estimate
// of a cluster whose history did not change since the last one: 64
// 8-GPU nodes, two weeks of 20,000 finished jobs in 40 queues, 64 jobs
// running and 100 waiting. What it measures beyond the forecast is
// reading the store and learning (or reusing) the predictor and its error
// model.
func BenchmarkPendingUnchangedHistory(b *testing.B) {
	st := storetest.New(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(20000, 64))
	var nodes []schedloop.Node
	for i := 0; i < 64; i++ {
		nodes = append(nodes, schedloop.Node{Name: fmt.Sprintf("n%02d", i), GPUModel: "H100", GPUCount: 8, CPUMilli: 64000, MemoryMiB: 512000,
			Ready: true, FirstSeen: now.Add(-30 * 24 * time.Hour), LastSeen: now})
	}
	if err := st.UpsertNodes(ctx, nodes); err != nil {
		b.Fatal(err)
	}
	job := func(uid string, q int, gpus int, created time.Time) schedloop.Job {
		return schedloop.Job{UID: uid, Namespace: "ml", Name: fmt.Sprintf("q%d-%s", q, uid), Kind: schedloop.JobKindPod, Queue: fmt.Sprintf("team-%d", q),
			MinMember: 1, GPUsPerMember: gpus, Created: created, Phase: schedloop.PhasePending}
	}
	var jobs []schedloop.Job
	for i := 0; i < 20000; i++ {
		q := rng.IntN(40)
		start := now.Add(-time.Duration(1+rng.IntN(13*24*3600)) * time.Second)
		ran := time.Duration(float64(time.Duration(10+q*10)*time.Minute) * math.Exp(rng.NormFloat64()))
		j := job(fmt.Sprintf("done-%d", i), q, 1<<rng.IntN(4), start)
		j.FirstScheduled, j.Admitted, j.Started, j.Finished, j.Phase = start, start, start, start.Add(ran), schedloop.PhaseSucceeded
		if j.Finished.After(now) {
			continue
		}
		jobs = append(jobs, j)
	}
	var pods []schedloop.Pod
	for i := 0; i < 64; i++ {
		start := now.Add(-time.Duration(1+rng.IntN(5*3600)) * time.Second)
		j := job(fmt.Sprintf("run-%d", i), rng.IntN(40), 8, start)
		j.FirstScheduled, j.Admitted, j.Started, j.Phase = start, start, start, schedloop.PhaseRunning
		jobs = append(jobs, j)
		pods = append(pods, schedloop.Pod{UID: "pod-" + j.UID, Namespace: "ml", Name: j.Name, JobUID: j.UID, Queue: j.Queue, GPUs: 8,
			Node: nodes[i].Name, Created: start, Scheduled: start, Started: start, Phase: schedloop.PhaseRunning})
	}
	for i := 0; i < 100; i++ {
		jobs = append(jobs, job(fmt.Sprintf("wait-%d", i), rng.IntN(40), 1<<rng.IntN(4), now.Add(-time.Duration(1+rng.IntN(3600))*time.Second)))
	}
	if err := st.UpsertJobs(ctx, jobs); err != nil {
		b.Fatal(err)
	}
	if err := st.UpsertPods(ctx, pods); err != nil {
		b.Fatal(err)
	}
	s := service(st)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a, err := s.Pending(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(a.Jobs) != 100 || a.Running != 64 {
			b.Fatalf("%d pending and %d running estimated, want 100 and 64", len(a.Jobs), a.Running)
		}
	}
}
