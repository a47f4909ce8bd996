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

// TestAssignFlavorsBorrowing: a flavour reachable only by borrowing ends
// the search under WhenCanBorrow MayStopSearch (the default); under
// TryNextFlavor Kueue goes on and takes a later flavour that fits within
// nominal quota. A flavour with no room falls through to the next.
func TestAssignFlavorsBorrowing(t *testing.T) {
	c := flavorQueue("team-c", 8, 0)
	d := flavorQueue("team-d", 0, 16)
	cohort := KueueCohort{c, d}
	ask := map[string]int64{gpu: 8}

	// team-d has no h100 of its own; team-c lends its 8.
	req, mode := cohort.AssignFlavors(d, ask, nil)
	if mode != KueueFit || flavorOf(t, req) != "h100" {
		t.Errorf("MayStopSearch: %v %v, want h100 (borrowed) fit", req, mode)
	}
	d.WhenCanBorrow = KueueTryNextFlavor
	req, mode = cohort.AssignFlavors(d, ask, nil)
	if mode != KueueFit || flavorOf(t, req) != "spot" || req[fr("spot", gpu)] != 8 {
		t.Errorf("TryNextFlavor: %v %v, want 8 spot fit without borrowing", req, mode)
	}

	// team-c's h100 is all used and nobody borrows it: no room, no
	// reclaim; spot fits by borrowing team-d's.
	c.Admit(map[FlavorResource]int64{fr("h100", gpu): 8})
	req, mode = cohort.AssignFlavors(c, ask, nil)
	if mode != KueueFit || flavorOf(t, req) != "spot" || !cohort.Borrows(c, req) {
		t.Errorf("h100 full: %v %v, want spot, borrowing", req, mode)
	}
}

// TestAssignFlavorsReclaim: a flavour admitted only by reclaiming what
// another queue borrows is passed over for a later one that fits under
// WhenCanPreempt TryNextFlavor (the default), taken under MayStopSearch.
// With both policies TryNextFlavor, the preference decides between a
// flavour that borrows and one that reclaims.
func TestAssignFlavorsReclaim(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	q1 := flavorQueue("q1", 8, 8)
	q2 := flavorQueue("q2", 8, 0)
	cohort := KueueCohort{q1, q2}
	borrowed := map[FlavorResource]int64{fr("h100", gpu): 16}
	q2.Admit(borrowed)
	running := []KueueAdmitted{{Key: "q2-big", Queue: q2, Req: borrowed, Admitted: t0}}
	ask := map[string]int64{gpu: 8}

	req, mode := cohort.AssignFlavors(q1, ask, running)
	if mode != KueueFit || flavorOf(t, req) != "spot" {
		t.Errorf("TryNextFlavor: %v %v, want spot fit", req, mode)
	}
	q1.WhenCanPreempt = KueueMayStopSearch
	req, mode = cohort.AssignFlavors(q1, ask, running)
	if mode != KueueReclaim || flavorOf(t, req) != "h100" {
		t.Errorf("MayStopSearch: %v %v, want h100 by reclaim", req, mode)
	}
	if got := q2.Usage[fr("h100", gpu)]; got != 16 {
		t.Errorf("q2 uses %d h100 after the search, want its 16 untouched", got)
	}

	// p1 owns spot, p2 borrows all of it; p2 lends h100, of which p1 has
	// none. For p1, h100 fits by borrowing, spot only by reclaim.
	p1 := flavorQueue("p1", 0, 8)
	p2 := flavorQueue("p2", 8, 0)
	p1.WhenCanBorrow, p1.WhenCanPreempt = KueueTryNextFlavor, KueueTryNextFlavor
	cohort = KueueCohort{p1, p2}
	onSpot := map[FlavorResource]int64{fr("spot", gpu): 8}
	p2.Admit(onSpot)
	running = []KueueAdmitted{{Key: "p2-spot", Queue: p2, Req: onSpot, Admitted: t0}}
	req, mode = cohort.AssignFlavors(p1, ask, running)
	if mode != KueueFit || flavorOf(t, req) != "h100" {
		t.Errorf("BorrowingOverPreemption: %v %v, want h100 fit, borrowing", req, mode)
	}
	p1.PreemptionOverBorrowing = true
	req, mode = cohort.AssignFlavors(p1, ask, running)
	if mode != KueueReclaim || flavorOf(t, req) != "spot" {
		t.Errorf("PreemptionOverBorrowing: %v %v, want spot by reclaim", req, mode)
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
