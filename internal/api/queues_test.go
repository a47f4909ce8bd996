package api_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

type queuesAnswer struct {
	Profile, Order string
	QuotaNote      string `json:"quota_note"`
	OrderNote      string `json:"order_note"`
	Recommendation *struct {
		Changes []struct {
			ClusterQueue string `json:"cluster_queue"`
			From, To     float64
		}
		QuotaWaitBefore float64 `json:"quota_wait_before_seconds"`
		QuotaWaitAfter  float64 `json:"quota_wait_after_seconds"`
		Patch           string
	} `json:"quota_recommendation"`
	Starvation float64 `json:"starvation_bound_seconds"`
	Queues     []struct {
		Name, Kind        string
		PendingGPUs       float64  `json:"pending_gpus"`
		UsedGPUs          *float64 `json:"used_gpus"`
		AdmittedWorkloads *int     `json:"admitted_workloads"`
		Spec              *struct {
			Cohort       string
			NominalGPUs  float64 `json:"nominal_gpus"`
			ReservedGPUs float64 `json:"reserved_gpus"`
			BorrowedGPUs float64 `json:"borrowed_gpus"`
			FairWeight   float64 `json:"fair_weight"`
			Borrowing    string
			Quotas       []struct {
				Flavor, Resource string
				Nominal          float64
				BorrowingLimit   *float64 `json:"borrowing_limit"`
			}
		}
		Pending []struct {
			Position       int
			Name, Wait     string
			GPUs           float64
			WaitingSeconds float64 `json:"waiting_seconds"`
		}
	}
}

// Within a ClusterQueue the higher priority waits ahead of the earlier
// arrival; an admitted Workload's GPUs are its queue's use; a job outside
// Kueue waits in its label's queue, for capacity.
func TestQueues(t *testing.T) {
	st := storetest.New(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	m := time.Minute
	job := func(name string, ago time.Duration, prio int32, gpus int) schedloop.Job {
		return schedloop.Job{UID: name, Namespace: "ml", Name: name, Kind: schedloop.JobKindPod, Queue: "batch", MinMember: 1,
			Priority: prio, GPUsPerMember: gpus, Created: now.Add(-ago), Phase: schedloop.PhasePending}
	}
	run := job("run", 30*m, 0, 4)
	run.Admitted, run.Phase = now.Add(-29*m), schedloop.PhaseRunning
	jobs := []schedloop.Job{run, job("old", 20*m, 0, 2), job("urgent", 10*m, 100, 8), job("reserved", 5*m, 0, 1), job("plain", 15*m, 0, 3)}
	if err := st.UpsertJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	qr := func(ago time.Duration, status string) []schedloop.KueueCondition {
		return []schedloop.KueueCondition{{Type: "QuotaReserved", Status: status, Reason: "r", At: now.Add(-ago), Category: schedloop.WaitQuota}}
	}
	var ws []schedloop.KueueWorkload
	for _, w := range []struct {
		name, cq string
		conds    []schedloop.KueueCondition
	}{{"run", "cq", qr(29*m, "True")}, {"old", "", qr(20*m, "False")}, {"urgent", "", nil}, {"reserved", "cq", qr(m, "True")}} {
		ws = append(ws, schedloop.KueueWorkload{UID: "w-" + w.name, Namespace: "ml", Name: w.name, LocalQueue: "lq", ClusterQueue: w.cq,
			CreatedAt: now.Add(-30 * m), Conditions: w.conds})
	}
	if err := st.UpsertKueueWorkloads(ctx, ws); err != nil {
		t.Fatal(err)
	}
	h := api.NewRouter(st, api.Options{Now: func() time.Time { return now }})
	var a queuesAnswer
	if code := get(t, h, "/api/v1/queues", nil, &a); code != 200 {
		t.Fatalf("queues: %d", code)
	}
	if a.Profile != "default" || a.Order != "arrival" || a.QuotaNote == "" {
		t.Errorf("profile %q order %q note %q: want default, arrival and a note that cq's spec is not stored", a.Profile, a.Order, a.QuotaNote)
	}
	if q := a.Queues[len(a.Queues)-1]; q.Spec != nil {
		t.Errorf("cq has a spec %+v before any was stored", q.Spec)
	}
	type row struct {
		Queue, Kind, Job, Wait string
		Position               int
		GPUs, Waited           float64
	}
	var got []row
	for _, q := range a.Queues {
		for _, p := range q.Pending {
			got = append(got, row{q.Name, q.Kind, p.Name, p.Wait, p.Position, p.GPUs, p.WaitingSeconds})
		}
	}
	want := []row{
		{"batch", "label", "plain", "capacity", 1, 3, 900},
		{"cq", "cluster-queue", "urgent", "quota", 1, 8, 600},
		{"cq", "cluster-queue", "old", "quota", 2, 2, 1200},
		{"cq", "cluster-queue", "reserved", "capacity", 3, 1, 300},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("pending (-want +got):\n%s", d)
	}
	if len(a.Queues) != 2 {
		t.Fatalf("%d queues, want batch and cq", len(a.Queues))
	}
	if q := a.Queues[0]; q.UsedGPUs != nil {
		t.Errorf("label queue %s has used_gpus %v: only ClusterQueues' use is known", q.Name, *q.UsedGPUs)
	}
	// reserved holds quota (1 GPU) though its pod is not bound yet.
	if q := a.Queues[1]; q.UsedGPUs == nil || *q.UsedGPUs != 5 || *q.AdmittedWorkloads != 2 || q.PendingGPUs != 11 {
		t.Errorf("cq: used %v admitted %v pending %v; want 5 GPUs of 2 workloads, 11 pending", q.UsedGPUs, q.AdmittedWorkloads, q.PendingGPUs)
	}

	// With cq's spec stored, its nominal and borrowed GPUs are Kueue's, its
	// quotas listed in the spec's order (as Kueue tries flavours), and a
	// ClusterQueue with nothing waiting or admitted is listed too.
	limit := int64(4000)
	if err := st.UpsertKueueClusterQueues(ctx, []schedloop.KueueClusterQueue{
		{Name: "cq", Cohort: "org", ObservedAt: now, Quotas: []schedloop.KueueQuota{
			{Flavor: "h100", Resource: "nvidia.com/gpu", Nominal: 4000, BorrowingLimit: &limit, Reserved: 5000, Borrowed: 1000},
			{Flavor: "h100", Resource: "cpu", Nominal: 64000}}},
		{Name: "idle", Cohort: "org", FairWeight: 2, ObservedAt: now, Quotas: []schedloop.KueueQuota{
			{Flavor: "h100", Resource: "nvidia.com/gpu", Nominal: 8000}}},
	}); err != nil {
		t.Fatal(err)
	}
	var s queuesAnswer
	if code := get(t, h, "/api/v1/queues", nil, &s); code != 200 {
		t.Fatalf("queues with specs: %d", code)
	}
	if s.QuotaNote != "" || len(s.Queues) != 3 {
		t.Fatalf("with specs: note %q, %d queues; want no note and batch, cq, idle", s.QuotaNote, len(s.Queues))
	}
	if sp := s.Queues[1].Spec; sp == nil || sp.Cohort != "org" || sp.NominalGPUs != 4 || sp.ReservedGPUs != 5 || sp.BorrowedGPUs != 1 ||
		sp.FairWeight != 1 || len(sp.Quotas) != 2 || sp.Quotas[0].BorrowingLimit == nil || *sp.Quotas[0].BorrowingLimit != 4 ||
		sp.Quotas[1].BorrowingLimit != nil ||
		sp.Borrowing != "borrowing from cohort org: nvidia.com/gpu on h100 nominal 4, up to 4 more; cpu on h100 nominal 64, as much more as the cohort lends" {
		t.Errorf("cq's spec = %+v; want cohort org, nominal 4, reserved 5, borrowed 1 GPUs, weight 1, a 4-GPU borrowing limit", sp)
	}
	if q := s.Queues[2]; q.Name != "idle" || q.Spec == nil || q.Spec.FairWeight != 2 || *q.UsedGPUs != 0 || len(q.Pending) != 0 {
		t.Errorf("idle = %+v; want its spec, weight 2, nothing used or waiting", q)
	}
	if s.Recommendation != nil {
		t.Errorf("a quota recommendation %+v before any was stored", s.Recommendation)
	}

	// The tuner's latest quota proposal is shown in the resources' units
	// with its evidence and patch; an older one is not.
	for i, to := range []int64{6000, 8000} {
		if _, err := st.InsertKueueQuotaRecommendation(ctx, schedloop.KueueQuotaRecommendation{Created: now.Add(time.Duration(i) * m),
			Changes:          []schedloop.KueueQuotaChange{{ClusterQueue: "cq", Flavor: "h100", Resource: "nvidia.com/gpu", From: 4000, To: to}},
			QuotaWaitBeforeS: 600, QuotaWaitAfterS: 60, Jobs: 3, Patch: "kubectl patch clusterqueue cq"}); err != nil {
			t.Fatal(err)
		}
	}
	var r queuesAnswer
	if code := get(t, h, "/api/v1/queues", nil, &r); code != 200 {
		t.Fatalf("queues with a recommendation: %d", code)
	}
	if rec := r.Recommendation; rec == nil || len(rec.Changes) != 1 || rec.Changes[0].From != 4 || rec.Changes[0].To != 8 ||
		rec.QuotaWaitBefore != 600 || rec.QuotaWaitAfter != 60 || rec.Patch != "kubectl patch clusterqueue cq" {
		t.Errorf("quota recommendation = %+v; want the latest, cq 4 -> 8 GPUs, 600s -> 60s, with its patch", rec)
	}

	// Under an applied shortest-service profile the answer names it, and
	// says the service key is not part of the positions.
	id, err := st.InsertProfile(ctx, schedloop.Profile{Name: "sjf", Weights: map[string]float64{"bestfit": 1}, Order: "shortest-service", StarvationBoundSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ApplyProfile(ctx, id, now); err != nil {
		t.Fatal(err)
	}
	var b queuesAnswer
	if code := get(t, h, "/api/v1/queues", nil, &b); code != 200 {
		t.Fatalf("queues under sjf: %d", code)
	}
	if b.Profile != "sjf" || b.Order != "shortest-service" || b.Starvation != 600 || b.OrderNote == "" {
		t.Errorf("under sjf: profile %q order %q starvation %v note %q; want sjf, shortest-service, 600 and a note", b.Profile, b.Order, b.Starvation, b.OrderNote)
	}
	if a.OrderNote != "" {
		t.Errorf("under arrival the answer has order_note %q, want none", a.OrderNote)
	}
}
