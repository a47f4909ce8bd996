package store_test

import (
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
