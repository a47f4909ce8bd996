package scoring

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// Kueue's admission rules for a cohort of ClusterQueues, so that a replay of a
// cluster with Kueue in front of the scheduler admits jobs when Kueue would.
// Each rule follows kubernetes-sigs/kueue v0.19 and names the function it
// follows; they cover one level of cohort (ClusterQueues under a cohort with
// no parent), which is how the harness and most clusters set Kueue up.
// Quantities are in the resource's base unit (GPUs, millicores, bytes).

// FlavorResource names one resource of one ResourceFlavor, Kueue's quota key.
type FlavorResource struct {
	Flavor   string
	Resource string
}

// KueueQuota is a ClusterQueue's quota for one FlavorResource. A nil limit is
// no limit: nil BorrowingLimit may borrow all the cohort lends, nil
// LendingLimit lends all of Nominal, as in Kueue's API.
type KueueQuota struct {
	Nominal        int64
	BorrowingLimit *int64
	LendingLimit   *int64
}

// KueueClusterQueue is a ClusterQueue's quota and the usage of its admitted
// workloads. Cohort "" is a ClusterQueue alone: it never borrows or lends.
// FairWeight 0 means 1, Kueue's default.
type KueueClusterQueue struct {
	Name       string
	Cohort     string
	Quotas     map[FlavorResource]KueueQuota
	Usage      map[FlavorResource]int64
	FairWeight float64
	// Groups are the ClusterQueue's resource groups in spec order (see
	// AssignFlavors). Nil: each resource of Quotas is a group of its own
	// whose flavours are tried in name order.
	Groups []KueueResourceGroup
	// WhenCanBorrow and WhenCanPreempt are spec.flavorFungibility's
	// policies, KueueMayStopSearch or KueueTryNextFlavor; "" is Kueue's
	// default, MayStopSearch and TryNextFlavor. PreemptionOverBorrowing is
	// its preference PreemptionOverBorrowing; false is
	// BorrowingOverPreemption, Kueue's default.
	WhenCanBorrow           string
	WhenCanPreempt          string
	PreemptionOverBorrowing bool
}

// KueueCohort is the ClusterQueues that share one cohort's quota.
type KueueCohort []*KueueClusterQueue

// localQuota is the part of Nominal the ClusterQueue never lends
// (resourceNode.localQuota in pkg/cache/scheduler/resource_node.go).
func (q KueueQuota) localQuota() int64 {
	if q.LendingLimit == nil {
		return 0
	}
	return max(0, q.Nominal-*q.LendingLimit)
}

// members returns the ClusterQueues sharing cq's cohort, cq included.
func (c KueueCohort) members(cq *KueueClusterQueue) []*KueueClusterQueue {
	if cq.Cohort == "" {
		return []*KueueClusterQueue{cq}
	}
	var out []*KueueClusterQueue
	for _, m := range c {
		if m.Cohort == cq.Cohort {
			out = append(out, m)
		}
	}
	return out
}

// cohortFree is the cohort's lendable quota left for fr: what its members
// lend minus what they use beyond what they keep (accumulateFromChild).
func (c KueueCohort) cohortFree(cq *KueueClusterQueue, fr FlavorResource) int64 {
	var subtree, used int64
	for _, m := range c.members(cq) {
		q := m.Quotas[fr]
		lq := q.localQuota()
		subtree += q.Nominal - lq
		used += max(0, m.Usage[fr]-lq)
	}
	return subtree - used
}

// Available is how much of fr cq can still admit: its unlent quota left plus
// what the cohort has free, capped by its BorrowingLimit (available in
// pkg/cache/scheduler/resource_node.go). It may be negative after quota
// shrank under running work.
func (c KueueCohort) Available(cq *KueueClusterQueue, fr FlavorResource) int64 {
	q := cq.Quotas[fr]
	if cq.Cohort == "" {
		return q.Nominal - cq.Usage[fr]
	}
	lq := q.localQuota()
	parent := c.cohortFree(cq, fr)
	if q.BorrowingLimit != nil {
		storedInParent := q.Nominal - lq
		usedInParent := max(0, cq.Usage[fr]-lq)
		parent = min(storedInParent-usedInParent+*q.BorrowingLimit, parent)
	}
	return max(0, lq-cq.Usage[fr]) + parent
}

// Fits says whether a workload asking req fits cq's quota now.
func (c KueueCohort) Fits(cq *KueueClusterQueue, req map[FlavorResource]int64) bool {
	for fr, v := range req {
		if v > c.Available(cq, fr) {
			return false
		}
	}
	return true
}

// Borrows says whether admitting req takes cq past its nominal quota on any
// flavour-resource it asks for.
func (c KueueCohort) Borrows(cq *KueueClusterQueue, req map[FlavorResource]int64) bool {
	for fr, v := range req {
		if cq.Usage[fr]+v > cq.Quotas[fr].Nominal {
			return true
		}
	}
	return false
}

// DominantShare is cq's dominant resource share after admitting req: the
// largest fraction (in thousandths) of the cohort's lendable quota of one
// resource that cq would borrow, over its fair weight; 0 when it would not
// borrow (dominantResourceShare in pkg/cache/scheduler/fair_sharing.go).
func (c KueueCohort) DominantShare(cq *KueueClusterQueue, req map[FlavorResource]int64) float64 {
	if cq.Cohort == "" {
		return 0
	}
	borrowed := map[string]int64{}
	frs := map[FlavorResource]bool{}
	for fr := range cq.Quotas {
		frs[fr] = true
	}
	for fr := range req {
		frs[fr] = true
	}
	for fr := range frs {
		if b := req[fr] + cq.Usage[fr] - cq.Quotas[fr].Nominal; b > 0 {
			borrowed[fr.Resource] += b
		}
	}
	lendable := map[string]int64{}
	for _, m := range c.members(cq) {
		for fr, q := range m.Quotas {
			lendable[fr.Resource] += q.Nominal - q.localQuota()
		}
	}
	var share float64
	for r, b := range borrowed {
		if l := lendable[r]; l > 0 {
			share = max(share, float64(b)*1000/float64(l))
		}
	}
	w := cq.FairWeight
	if w <= 0 {
		w = 1
	}
	return share / w
}

// KueueEntry is the head of one ClusterQueue competing in an admission cycle.
type KueueEntry struct {
	Key      string
	Queue    *KueueClusterQueue
	Req      map[FlavorResource]int64
	Priority int32
	Created  time.Time
}

// KueueOrder sorts a cycle's heads in the order Kueue's scheduler tries them:
// those that would not borrow first, then, with fair sharing, the lower
// dominant share after admission (entryComparer.less in
// pkg/scheduler/fair_sharing_iterator.go), then higher priority, then
// earlier creation, then key so the order is total.
func (c KueueCohort) KueueOrder(entries []KueueEntry, fairSharing bool) {
	slices.SortStableFunc(entries, func(a, b KueueEntry) int {
		ab, bb := c.Borrows(a.Queue, a.Req), c.Borrows(b.Queue, b.Req)
		if ab != bb {
			if ab {
				return 1
			}
			return -1
		}
		if fairSharing {
			if r := cmp.Compare(c.DominantShare(a.Queue, a.Req), c.DominantShare(b.Queue, b.Req)); r != 0 {
				return r
			}
		}
		if a.Priority != b.Priority {
			return cmp.Compare(b.Priority, a.Priority)
		}
		if r := a.Created.Compare(b.Created); r != 0 {
			return r
		}
		return cmp.Compare(a.Key, b.Key)
	})
}

// Admit adds req to cq's usage.
func (cq *KueueClusterQueue) Admit(req map[FlavorResource]int64) {
	if cq.Usage == nil {
		cq.Usage = map[FlavorResource]int64{}
	}
	for fr, v := range req {
		cq.Usage[fr] += v
	}
}

// Release removes req from cq's usage, as when a workload finishes or is evicted.
func (cq *KueueClusterQueue) Release(req map[FlavorResource]int64) {
	for fr, v := range req {
		cq.Usage[fr] -= v
	}
}

// KueueAdmitted is an admitted workload that reclaim may evict.
type KueueAdmitted struct {
	Key      string
	Queue    *KueueClusterQueue
	Req      map[FlavorResource]int64
	Priority int32
	Admitted time.Time
}

// Reclaim picks the admitted workloads Kueue evicts so that a workload asking
// req in cq fits, reclaiming quota lent within the cohort
// (reclaimWithinCohort: Any): only workloads of other ClusterQueues that are
// borrowing on a flavour-resource cq asks for, lowest priority first and,
// among equals, the most recently admitted first (candidatesOrdering in
// pkg/scheduler/preemption/preemption.go). It evicts a candidate only while
// its queue still borrows, and only if cq is within its nominal quota after
// admission, since reclaiming is for what a queue is owed. It returns nil
// when no set of such evictions makes req fit, leaving usage as it was.
func (c KueueCohort) Reclaim(cq *KueueClusterQueue, req map[FlavorResource]int64, admitted []KueueAdmitted) []KueueAdmitted {
	if c.Fits(cq, req) || c.Borrows(cq, req) || cq.Cohort == "" {
		return nil
	}
	var cands []KueueAdmitted
	for _, a := range admitted {
		if a.Queue == cq || a.Queue.Cohort != cq.Cohort {
			continue
		}
		for fr := range req {
			if a.Req[fr] > 0 && a.Queue.Usage[fr] > a.Queue.Quotas[fr].Nominal {
				cands = append(cands, a)
				break
			}
		}
	}
	slices.SortStableFunc(cands, func(a, b KueueAdmitted) int {
		if a.Priority != b.Priority {
			return cmp.Compare(a.Priority, b.Priority)
		}
		if r := b.Admitted.Compare(a.Admitted); r != 0 {
			return r
		}
		return cmp.Compare(a.Key, b.Key)
	})
	var victims []KueueAdmitted
	for _, v := range cands {
		if !borrowsOnAny(v.Queue, v.Req) {
			continue
		}
		v.Queue.Release(v.Req)
		victims = append(victims, v)
		if c.Fits(cq, req) {
			for _, u := range victims {
				u.Queue.Admit(u.Req)
			}
			return victims
		}
	}
	for _, u := range victims {
		u.Queue.Admit(u.Req)
	}
	return nil
}

// borrowsOnAny says whether q uses more than its nominal quota of any
// flavour-resource req asks for.
func borrowsOnAny(q *KueueClusterQueue, req map[FlavorResource]int64) bool {
	for fr, v := range req {
		if v > 0 && q.Usage[fr] > q.Quotas[fr].Nominal {
			return true
		}
	}
	return false
}

// KueueResourceGroup is one of a ClusterQueue's resource groups: the
// resources it covers and its flavours in the order Kueue tries them. A
// workload's resources of one group all get the same flavour.
type KueueResourceGroup struct {
	Resources []string
	Flavors   []string
}

// Kueue's FlavorFungibility policies and preference (spec.flavorFungibility).
const (
	KueueMayStopSearch           = "MayStopSearch"
	KueueTryNextFlavor           = "TryNextFlavor"
	KueuePreemptionOverBorrowing = "PreemptionOverBorrowing"
)

// KueueAssignMode is how a flavour assignment can be admitted now, worst
// first (FlavorAssignmentMode in pkg/scheduler/flavorassigner, with NoFit
// and a preemption that finds no candidates taken as one: neither admits).
type KueueAssignMode int

const (
	KueueNoFit KueueAssignMode = iota
	// KueueReclaim: admitted once workloads of other ClusterQueues that
	// borrow the flavour are evicted (Reclaim).
	KueueReclaim
	KueueFit
)

// groups is cq's resource groups: Groups when set, else one group per
// flavour-resource of Quotas, each with its one flavour.
func (cq *KueueClusterQueue) groups() []KueueResourceGroup {
	if len(cq.Groups) > 0 {
		return cq.Groups
	}
	frs := slices.SortedFunc(func(yield func(FlavorResource) bool) {
		for fr := range cq.Quotas {
			if !yield(fr) {
				return
			}
		}
	}, func(a, b FlavorResource) int {
		return cmp.Or(cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Flavor, b.Flavor))
	})
	var out []KueueResourceGroup
	for _, fr := range frs {
		if n := len(out); n > 0 && out[n-1].Resources[0] == fr.Resource {
			out[n-1].Flavors = append(out[n-1].Flavors, fr.Flavor)
			continue
		}
		out = append(out, KueueResourceGroup{Resources: []string{fr.Resource}, Flavors: []string{fr.Flavor}})
	}
	return out
}

// flavorMode is how one flavour would admit a group's requests: its
// KueueAssignMode and whether it borrows (Kueue's borrowing level, one
// cohort deep: 0 or 1).
type flavorMode struct {
	mode   KueueAssignMode
	borrow bool
}

// preferred says whether a is a better flavour than b for the ClusterQueue
// (isPreferred in pkg/scheduler/flavorassigner/flavorassigner.go): with
// PreemptionOverBorrowing the one that does not borrow first, then the one
// that needs no eviction; otherwise (BorrowingOverPreemption, Kueue's
// default) the other way round.
func (cq *KueueClusterQueue) preferred(a, b flavorMode) bool {
	if a.mode == KueueNoFit {
		return false
	}
	if b.mode == KueueNoFit {
		return true
	}
	if cq.PreemptionOverBorrowing && a.borrow != b.borrow {
		return !a.borrow
	}
	if a.mode != b.mode {
		return a.mode > b.mode
	}
	return !a.borrow && b.borrow
}

// tryNext says whether Kueue goes on to the next flavour after one that
// would admit as m (shouldTryNextFlavor): always after one that does not
// admit, after one that needs evictions unless WhenCanPreempt is
// MayStopSearch, after one that borrows when WhenCanBorrow is TryNextFlavor.
func (cq *KueueClusterQueue) tryNext(m flavorMode) bool {
	if m.mode == KueueNoFit {
		return true
	}
	if m.mode == KueueReclaim && cq.WhenCanPreempt != KueueMayStopSearch {
		return true
	}
	return m.borrow && cq.WhenCanBorrow == KueueTryNextFlavor
}

// AssignFlavors picks, for a workload asking ask (resource -> quantity, in
// the resource's base unit, any resource: GPUs, CPU, other extended
// resources), a flavour for each of cq's resource groups, as Kueue's
// flavour assigner does (findFlavorForPodSets): the group's flavours in
// order, each judged on cq's quota now (Fits, Borrows, Reclaim over
// admitted); the first that needs no further search is taken, else the
// preferred of those tried. It returns the assignment and the worst mode of
// its groups; KueueNoFit with a nil assignment when some group has no
// flavour that admits, or ask names a resource no group covers.
//
// Kueue assigns each pod set on its own and resumes a pending workload's
// search after the flavour it last tried; here the workload's pod sets are
// one request and every search starts at the first flavour. Flavours'
// taints and node labels are not judged: every flavour is taken to accept
// the workload's pods.
func (c KueueCohort) AssignFlavors(cq *KueueClusterQueue, ask map[string]int64, admitted []KueueAdmitted) (map[FlavorResource]int64, KueueAssignMode) {
	out := map[FlavorResource]int64{}
	worst := KueueFit
	covered := 0
	for _, g := range cq.groups() {
		var rs []string
		for _, r := range g.Resources {
			if _, ok := ask[r]; ok {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		covered += len(rs)
		var best map[FlavorResource]int64
		bestMode := flavorMode{mode: KueueNoFit}
		for _, f := range g.Flavors {
			req := make(map[FlavorResource]int64, len(rs))
			for _, r := range rs {
				req[FlavorResource{Flavor: f, Resource: r}] = ask[r]
			}
			m := flavorMode{mode: KueueNoFit}
			switch {
			case c.Fits(cq, req):
				m = flavorMode{mode: KueueFit, borrow: c.Borrows(cq, req)}
			case c.Reclaim(cq, req, admitted) != nil:
				m = flavorMode{mode: KueueReclaim}
			}
			if !cq.tryNext(m) {
				best, bestMode = req, m
				break
			}
			if cq.preferred(m, bestMode) {
				best, bestMode = req, m
			}
		}
		if bestMode.mode == KueueNoFit {
			return nil, KueueNoFit
		}
		worst = min(worst, bestMode.mode)
		maps.Copy(out, best)
	}
	if covered < len(ask) {
		return nil, KueueNoFit
	}
	return out, worst
}
