package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// Waiting jobs take the ClusterQueue of their Workload (or of their
// LocalQueue's other Workloads), else their queue label; admitted
// Workloads' GPUs count as their ClusterQueue's use until they finish.
func TestQueuedJobsAndClusterQueueUsage(t *testing.T) {
	st := storetest.New(t)
	ctx := context.Background()
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	m := time.Minute
	job := func(uid string, created time.Duration, gpus, milli, members int) schedloop.Job {
		kind := schedloop.JobKindPod
		if members > 1 {
			kind = schedloop.JobKindGang
		}
		return schedloop.Job{UID: uid, Namespace: "ml", Name: uid, Kind: kind, Queue: "label-q", MinMember: members,
			GPUsPerMember: gpus, GPUMilliPerMember: milli, Created: t0.Add(created), Phase: schedloop.PhasePending}
	}
	running := job("running", 0, 4, 0, 2)
	running.Admitted, running.Phase = t0.Add(m), schedloop.PhaseRunning
	done := job("done", 0, 8, 0, 1)
	done.Admitted, done.Finished, done.Phase = t0.Add(m), t0.Add(2*m), schedloop.PhaseSucceeded
	shared := job("shared", 3*m, 1, 500, 1)
	shared.Admitted, shared.Phase = t0.Add(4*m), schedloop.PhaseRunning
	jobs := []schedloop.Job{running, done, shared,
		job("evicted", 2*m, 2, 0, 1), // admitted once, evicted: waits for quota in its ClusterQueue
		job("new", 5*m, 1, 0, 1),     // never admitted: its LocalQueue's ClusterQueue
		job("lonely", 6*m, 1, 0, 1),  // never admitted, LocalQueue with no admitted Workload
		job("plain", 7*m, 3, 0, 1),   // no Workload: its label
	}
	if err := st.UpsertJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	reserved := func(at time.Duration, status string) schedloop.KueueCondition {
		return schedloop.KueueCondition{Type: "QuotaReserved", Status: status, Reason: "r", At: t0.Add(at), Category: schedloop.WaitQuota}
	}
	wl := func(name, lq, cq string, conds ...schedloop.KueueCondition) schedloop.KueueWorkload {
		return schedloop.KueueWorkload{UID: "w-" + name, Namespace: "ml", Name: name, LocalQueue: lq, ClusterQueue: cq,
			CreatedAt: t0, Conditions: conds}
	}
	finished := schedloop.KueueCondition{Type: "Finished", Status: "True", Reason: "Succeeded", At: t0.Add(2 * m)}
	ws := []schedloop.KueueWorkload{
		wl("running", "lq-a", "cq-a", reserved(m, "True")),
		wl("done", "lq-a", "cq-a", reserved(m, "True"), finished),
		wl("shared", "lq-b", "cq-b", reserved(4*m, "True")),
		wl("evicted", "lq-b", "cq-b", reserved(m, "True"), reserved(2*m, "False")),
		wl("new", "lq-a", ""),
		wl("lonely", "lq-z", "", reserved(6*m, "False")),
	}
	if err := st.UpsertKueueWorkloads(ctx, ws); err != nil {
		t.Fatal(err)
	}
	got, err := st.QueuedJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.QueuedJob{
		{UID: "evicted", Namespace: "ml", Name: "evicted", Queue: "cq-b", QueueKind: "cluster-queue", Members: 1, GPUs: 2, Created: t0.Add(2 * m), QuotaWait: true},
		{UID: "new", Namespace: "ml", Name: "new", Queue: "cq-a", QueueKind: "cluster-queue", Members: 1, GPUs: 1, Created: t0.Add(5 * m), QuotaWait: true},
		{UID: "lonely", Namespace: "ml", Name: "lonely", Queue: "ml/lq-z", QueueKind: "local-queue", Members: 1, GPUs: 1, Created: t0.Add(6 * m), QuotaWait: true},
		{UID: "plain", Namespace: "ml", Name: "plain", Queue: "label-q", QueueKind: "label", Members: 1, GPUs: 3, Created: t0.Add(7 * m)},
	}
	for i := range got {
		got[i].Created = got[i].Created.UTC()
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("queued jobs (-want +got):\n%s", d)
	}
	use, err := st.ClusterQueueUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantUse := []store.ClusterQueueUse{{ClusterQueue: "cq-a", Workloads: 1, GPUs: 8}, {ClusterQueue: "cq-b", Workloads: 1, GPUs: 0.5}}
	if d := cmp.Diff(wantUse, use); d != "" {
		t.Errorf("cluster queue use (-want +got):\n%s", d)
	}
}
