package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestKueueWorkloadHistory: three observations of one Workload — waiting for
// quota, admitted, preempted and waiting again — leave its whole condition
// history, the admission's cluster queue and flavour kept while it waits
// again, and a repeated observation adds nothing.
func TestKueueWorkloadHistory(t *testing.T) {
	s := storetest.New(t)
	ctx := t.Context()
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	base := schedloop.KueueWorkload{UID: "wl-1", Namespace: "ml", Name: "a2", LocalQueue: "team-a", CreatedAt: t0}
	waiting := schedloop.KueueCondition{Type: "QuotaReserved", Status: "False", Reason: "WaitingForQuota",
		Message: "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 16 more needed",
		At:      t0.Add(time.Second), Category: schedloop.WaitQuota}
	reserved := schedloop.KueueCondition{Type: "QuotaReserved", Status: "True", Reason: "QuotaReserved",
		Message: "Quota reserved in ClusterQueue team-a", At: t0.Add(time.Minute), Category: schedloop.WaitOther}
	admitted := schedloop.KueueCondition{Type: "Admitted", Status: "True", Reason: "Admitted",
		Message: "The workload is admitted", At: t0.Add(time.Minute), Category: schedloop.WaitOther}
	preempted := schedloop.KueueCondition{Type: "Preempted", Status: "True", Reason: "InCohortReclamation",
		Message: "Preempted to accommodate a workload (UID: b, JobUID: UNKNOWN) due to reclamation within the cohort; preemptor path: /research/team-b; preemptee path: /research/team-a",
		At:      t0.Add(10 * time.Minute), Category: schedloop.WaitPreemption}
	requeued := schedloop.KueueCondition{Type: "QuotaReserved", Status: "False", Reason: "PendingEvaluation",
		Message: preempted.Message, At: t0.Add(10 * time.Minute), Category: schedloop.WaitQuota}

	first := base
	first.Conditions = []schedloop.KueueCondition{waiting}
	second := base
	second.ClusterQueue, second.Flavors = "team-a", map[string]string{"nvidia.com/gpu": "h100"}
	second.Conditions = []schedloop.KueueCondition{reserved, admitted}
	third := base
	third.Conditions = []schedloop.KueueCondition{preempted, requeued}
	for _, w := range []schedloop.KueueWorkload{first, second, third, third} {
		if err := s.UpsertKueueWorkloads(ctx, []schedloop.KueueWorkload{w}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.KueueWorkloads(ctx, "ml")
	if err != nil {
		t.Fatal(err)
	}
	want := base
	want.ClusterQueue, want.Flavors = "team-a", map[string]string{"nvidia.com/gpu": "h100"}
	want.Conditions = []schedloop.KueueCondition{waiting, admitted, reserved, preempted, requeued}
	if diff := cmp.Diff([]schedloop.KueueWorkload{want}, got); diff != "" {
		t.Errorf("stored history (-want +got):\n%s", diff)
	}

	bad := base
	bad.Conditions = []schedloop.KueueCondition{{Type: "Admitted"}}
	if err := s.UpsertKueueWorkloads(ctx, []schedloop.KueueWorkload{bad}); err == nil {
		t.Error("condition without a time stored; want an error naming it")
	}
}

// TestKueueClusterQueues: a ClusterQueue's spec and quotas round-trip, a
// newer observation replaces its quotas whole (a dropped flavour goes), an
// older one is ignored, and a deleted ClusterQueue is gone with its quotas.
func TestKueueClusterQueues(t *testing.T) {
	s := storetest.New(t)
	ctx := t.Context()
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	limit := int64(8000)
	a := schedloop.KueueClusterQueue{Name: "team-a", Cohort: "research", FairWeight: 2, QueueingStrategy: "BestEffortFIFO",
		ReclaimWithinCohort: "Any", BorrowWithinCohort: "Never", WithinClusterQueue: "LowerPriority", ObservedAt: t0,
		WhenCanBorrow: "TryNextFlavor", WhenCanPreempt: "MayStopSearch", FungibilityPreference: "PreemptionOverBorrowing",
		// Spec order, not name order: it is the order Kueue tries flavours in.
		Quotas: []schedloop.KueueQuota{
			{Flavor: "h100", Resource: "nvidia.com/gpu", Nominal: 16000, BorrowingLimit: &limit, Reserved: 24000, Borrowed: 8000},
			{Flavor: "h100", Resource: "cpu", Nominal: 64000},
			{Flavor: "a100", Resource: "nvidia.com/gpu", Nominal: 8000},
			{Flavor: "a100", Resource: "cpu", Nominal: 32000},
		}}
	b := schedloop.KueueClusterQueue{Name: "team-b", ObservedAt: t0,
		Quotas: []schedloop.KueueQuota{{Flavor: "h100", Resource: "nvidia.com/gpu", Nominal: 16000, LendingLimit: &limit}}}
	if err := s.UpsertKueueClusterQueues(ctx, []schedloop.KueueClusterQueue{a, b}); err != nil {
		t.Fatal(err)
	}
	got, err := s.KueueClusterQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]schedloop.KueueClusterQueue{a, b}, got); diff != "" {
		t.Errorf("stored cluster queues (-want +got):\n%s", diff)
	}

	newer := a
	newer.ObservedAt, newer.Quotas = t0.Add(time.Minute), a.Quotas[:1]
	newer.WhenCanBorrow, newer.WhenCanPreempt, newer.FungibilityPreference = "", "", ""
	older := a
	older.ObservedAt, older.Cohort = t0.Add(-time.Minute), "stale"
	for _, q := range []schedloop.KueueClusterQueue{newer, older} {
		if err := s.UpsertKueueClusterQueues(ctx, []schedloop.KueueClusterQueue{q}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteKueueClusterQueue(ctx, "team-b"); err != nil {
		t.Fatal(err)
	}
	got, err = s.KueueClusterQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]schedloop.KueueClusterQueue{newer}, got); diff != "" {
		t.Errorf("after a newer, an older observation and a delete (-want +got):\n%s", diff)
	}
	var quotas int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM kueue_cluster_queue_quotas`).Scan(&quotas); err != nil {
		t.Fatal(err)
	}
	if quotas != 1 {
		t.Errorf("%d quota rows stored, want team-a's one h100 row", quotas)
	}

	bad := b
	bad.Quotas = []schedloop.KueueQuota{{Flavor: "h100"}}
	if err := s.UpsertKueueClusterQueues(ctx, []schedloop.KueueClusterQueue{bad}); err == nil || !strings.Contains(err.Error(), "team-b") {
		t.Errorf("a quota without a resource stored (err %v), want an error naming the queue", err)
	}
}
