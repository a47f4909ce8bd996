package scoring

import (
	"maps"
	"testing"
	"time"
)

const gpu = "nvidia.com/gpu"

func fr(flavor, resource string) FlavorResource {
	return FlavorResource{Flavor: flavor, Resource: resource}
}

// flavorQueue is a ClusterQueue of cohort "lab" whose GPUs have two
// flavours, h100 then spot, with the nominal quotas given.
func flavorQueue(name string, h100, spot int64) *KueueClusterQueue {
	return &KueueClusterQueue{Name: name, Cohort: "lab",
		Quotas: map[FlavorResource]KueueQuota{fr("h100", gpu): {Nominal: h100}, fr("spot", gpu): {Nominal: spot}},
		Groups: []KueueResourceGroup{{Resources: []string{gpu}, Flavors: []string{"h100", "spot"}}}}
}

func flavorOf(t *testing.T, req map[FlavorResource]int64) string {
	t.Helper()
	if len(req) != 1 {
		t.Fatalf("assignment %v, want one flavour-resource", req)
	}
	for fr := range req {
		return fr.Flavor
	}
	return ""
}

// TestAssignFlavorsFungibility: a flavour reachable only by borrowing ends
// the search under WhenCanBorrow MayStopSearch (the default); under
// TryNextFlavor Kueue goes on and takes a later flavour that fits within
// nominal quota. A flavour with no room falls through to the next. A
// flavour admitted only by reclaiming what another queue borrows is passed
// over for a later one that fits under WhenCanPreempt TryNextFlavor (the
// default), taken under MayStopSearch. With both policies TryNextFlavor,
// the preference decides between a flavour that borrows and one that
// reclaims.
func TestAssignFlavorsFungibility(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	// queue is a flavorQueue with its flavour fungibility and what it has
	// admitted before the search.
	type queue struct {
		name                          string
		h100, spot                    int64
		whenCanBorrow, whenCanPreempt string
		preemptionOverBorrowing       bool
		admitted                      map[FlavorResource]int64
		running                       string // where set, admitted is the running workload of this key
	}
	for _, tt := range []struct {
		name   string
		cohort []queue
		asker  int // the queue of cohort that asks for 8 GPUs
		mode   KueueAssignMode
		flavor string // the one flavour assigned
		want   string // the expectation, as a failure states it
		// Checked only where set: the GPUs assigned, that the assignment
		// borrows, that the other queues' usage is what they admitted.
		gpus      int64
		borrows   bool
		untouched bool
	}{
		{
			// team-d has no h100 of its own; team-c lends its 8.
			name:   "MayStopSearch takes a borrowed flavour",
			cohort: []queue{{name: "team-c", h100: 8}, {name: "team-d", spot: 16}},
			asker:  1, mode: KueueFit, flavor: "h100", want: "h100 (borrowed) fit",
		},
		{
			name:   "TryNextFlavor passes over a borrowed flavour",
			cohort: []queue{{name: "team-c", h100: 8}, {name: "team-d", spot: 16, whenCanBorrow: KueueTryNextFlavor}},
			asker:  1, mode: KueueFit, flavor: "spot", gpus: 8, want: "8 spot fit without borrowing",
		},
		{
			// team-c's h100 is all used and nobody borrows it: no room, no
			// reclaim; spot fits by borrowing team-d's.
			name: "h100 full",
			cohort: []queue{{name: "team-c", h100: 8, admitted: map[FlavorResource]int64{fr("h100", gpu): 8}},
				{name: "team-d", spot: 16, whenCanBorrow: KueueTryNextFlavor}},
			asker: 0, mode: KueueFit, flavor: "spot", borrows: true, want: "spot, borrowing",
		},
		{
			name: "TryNextFlavor passes over a reclaim",
			cohort: []queue{{name: "q1", h100: 8, spot: 8},
				{name: "q2", h100: 8, admitted: map[FlavorResource]int64{fr("h100", gpu): 16}, running: "q2-big"}},
			asker: 0, mode: KueueFit, flavor: "spot", untouched: true, want: "spot fit",
		},
		{
			name: "MayStopSearch reclaims",
			cohort: []queue{{name: "q1", h100: 8, spot: 8, whenCanPreempt: KueueMayStopSearch},
				{name: "q2", h100: 8, admitted: map[FlavorResource]int64{fr("h100", gpu): 16}, running: "q2-big"}},
			asker: 0, mode: KueueReclaim, flavor: "h100", untouched: true, want: "h100 by reclaim",
		},
		{
			// p1 owns spot, p2 borrows all of it; p2 lends h100, of which p1
			// has none. For p1, h100 fits by borrowing, spot only by reclaim.
			name: "BorrowingOverPreemption",
			cohort: []queue{{name: "p1", spot: 8, whenCanBorrow: KueueTryNextFlavor, whenCanPreempt: KueueTryNextFlavor},
				{name: "p2", h100: 8, admitted: map[FlavorResource]int64{fr("spot", gpu): 8}, running: "p2-spot"}},
			asker: 0, mode: KueueFit, flavor: "h100", want: "h100 fit, borrowing",
		},
		{
			name: "PreemptionOverBorrowing",
			cohort: []queue{{name: "p1", spot: 8, whenCanBorrow: KueueTryNextFlavor, whenCanPreempt: KueueTryNextFlavor, preemptionOverBorrowing: true},
				{name: "p2", h100: 8, admitted: map[FlavorResource]int64{fr("spot", gpu): 8}, running: "p2-spot"}},
			asker: 0, mode: KueueReclaim, flavor: "spot", want: "spot by reclaim",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cohort := make(KueueCohort, len(tt.cohort))
			var running []KueueAdmitted
			for i, q := range tt.cohort {
				cq := flavorQueue(q.name, q.h100, q.spot)
				cq.WhenCanBorrow, cq.WhenCanPreempt, cq.PreemptionOverBorrowing = q.whenCanBorrow, q.whenCanPreempt, q.preemptionOverBorrowing
				if q.admitted != nil {
					cq.Admit(q.admitted)
				}
				if q.running != "" {
					running = append(running, KueueAdmitted{Key: q.running, Queue: cq, Req: q.admitted, Admitted: t0})
				}
				cohort[i] = cq
			}
			asker := cohort[tt.asker]
			req, mode := cohort.AssignFlavors(asker, map[string]int64{gpu: 8}, running)
			if mode != tt.mode || flavorOf(t, req) != tt.flavor || (tt.gpus != 0 && req[fr(tt.flavor, gpu)] != tt.gpus) ||
				(tt.borrows && !cohort.Borrows(asker, req)) {
				t.Errorf("%v %v, want %s", req, mode, tt.want)
			}
			if !tt.untouched {
				return
			}
			for i, q := range tt.cohort {
				for r, n := range q.admitted {
					if got := cohort[i].Usage[r]; i != tt.asker && got != n {
						t.Errorf("%s uses %d %s after the search, want its %d untouched", q.name, got, r.Flavor, n)
					}
				}
			}
		})
	}
}

// TestAssignFlavorsGroups: each resource group gets its own flavour;
// resources of one group share it; an extended resource other than GPUs is
// quota like any other; a resource no group covers admits nowhere.
func TestAssignFlavorsGroups(t *testing.T) {
	const rdma = "rdma/ib"
	q := &KueueClusterQueue{Name: "q",
		Quotas: map[FlavorResource]KueueQuota{
			fr("h100", gpu): {Nominal: 8}, fr("h100", "cpu"): {Nominal: 64000},
			fr("spot", gpu): {Nominal: 16}, fr("spot", "cpu"): {Nominal: 128000},
			fr("ib-a", rdma): {Nominal: 1}, fr("ib-b", rdma): {Nominal: 4},
		},
		Groups: []KueueResourceGroup{
			{Resources: []string{"cpu", gpu}, Flavors: []string{"h100", "spot"}},
			{Resources: []string{rdma}, Flavors: []string{"ib-a", "ib-b"}},
		}}
	cohort := KueueCohort{q}
	// 8 GPUs fit h100, but 96 CPUs do not: the group moves to spot whole.
	req, mode := cohort.AssignFlavors(q, map[string]int64{gpu: 8, "cpu": 96000, rdma: 2}, nil)
	want := map[FlavorResource]int64{fr("spot", gpu): 8, fr("spot", "cpu"): 96000, fr("ib-b", rdma): 2}
	if mode != KueueFit || !maps.Equal(req, want) {
		t.Errorf("assignment %v %v, want %v fit", req, mode, want)
	}
	if req, mode := cohort.AssignFlavors(q, map[string]int64{gpu: 1, rdma: 5}, nil); mode != KueueNoFit || req != nil {
		t.Errorf("5 rdma/ib of at most 4: %v %v, want no fit", req, mode)
	}
	if req, mode := cohort.AssignFlavors(q, map[string]int64{gpu: 1, "example.com/fpga": 1}, nil); mode != KueueNoFit || req != nil {
		t.Errorf("a resource no group covers: %v %v, want no fit", req, mode)
	}
	// Without Groups, each resource's flavours are tried in name order.
	q.Groups = nil
	if req, mode := cohort.AssignFlavors(q, map[string]int64{rdma: 2}, nil); mode != KueueFit || !maps.Equal(req, map[FlavorResource]int64{fr("ib-b", rdma): 2}) {
		t.Errorf("no groups: %v %v, want ib-b", req, mode)
	}
}
