package scoring

import (
	"cmp"
	"slices"
)

// Reservation and backfill (EASY backfilling, Lifka 1995; what Slurm's
// backfill scheduler does). When the job at the head of the order cannot
// start, every later job that fits would start instead, and a large gang
// can wait for ever behind a stream of small ones. With reservations on,
// the head job instead gets the earliest time its members fit — from the
// predicted ends of the running jobs — and the nodes it would take then.
// Other jobs may still start now, but on those nodes only if they are
// predicted to end before the reservation starts: they fill the hole
// without delaying the head job (as far as the predictions hold; a
// reservation is re-planned on every pass, so an overrun moves it later).
//
// Without reservations every job that fits starts (kube-scheduler's
// behaviour: each pod is tried on its own).

// WantsReservation reports whether a head job that arrived at created and
// cannot start at now gets a reservation: reservations are on and it has
// waited at least ReservationThreshold.
func (p Params) WantsReservation(created, now int64) bool {
	return p.Reservation && now-created >= int64(p.ReservationThreshold)
}

// Ending is a running job as reservation planning sees it: what it holds
// and when it is predicted to end (any monotone unit, the same as the
// reservation's).
type Ending struct {
	// Nodes indexes the nodes Allocs sit on, one per allocation.
	Nodes  []int
	Allocs []Allocation
	End    int64
}

// Reservation is where and from when the head job is expected to start.
type Reservation struct {
	Start int64
	// Nodes are the indices of the nodes the job would take at Start.
	Nodes []int
}

// PlaceTrial places the head job on a trial copy of the nodes and returns
// the indices of the nodes it would take, or nil when it does not fit
// there. It may change the trial nodes.
type PlaceTrial func(trial []*Node) []int

// PlaceTrialJob places a job of members pods shaped r on trial nodes as
// the scheduler places it: a lone pod on s's best node (SelectNode over
// every node), a gang all-or-nothing (PlaceGang) within maxLevel. It
// returns the indices of the nodes taken, or nil when the job does not
// fit. It is the PlaceTrial both the simulator and the live scheduler plan
// reservations with.
func PlaceTrialJob(trial []*Node, r Request, members, depth, maxLevel int, s Scorer) []int {
	if members <= 1 {
		i, devices := SelectNode(trial, r, func(_ int, n *Node) (float64, []int) { return s.Score(n, r) })
		if i < 0 {
			return nil
		}
		if _, err := trial[i].Allocate(r, devices); err != nil {
			return nil
		}
		return []int{i}
	}
	_, idx, ok := PlaceGang(trial, r, members, depth, maxLevel, s)
	if !ok {
		return nil
	}
	return idx
}

// PlanReservation finds the earliest time the head job fits: now, or the
// earliest predicted end among running after which it fits (a gang's own members already placed while it
// waits for the rest are passed in running as ending now: they are the
// job's own), releasing running jobs in order of predicted
// end on a copy of nodes (nodes is not changed). A predicted end already
// past counts as now: the job is expected to end at any moment. ok is
// false when the job does not fit even once every running job has ended.
func PlanReservation(nodes []*Node, running []Ending, now int64, place PlaceTrial) (res Reservation, ok bool) {
	order := make([]int, len(running))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(running[a].End, running[b].End) })
	trial := CloneNodes(nodes)
	// A job that fits as things stand (it waits for another reason: its
	// queue's limit, the rest of its gang) is expected now, where it fits.
	if idx := place(CloneNodes(trial)); idx != nil {
		slices.Sort(idx)
		return Reservation{Start: now, Nodes: slices.Compact(idx)}, true
	}
	for k := 0; k < len(order); {
		end := max(running[order[k]].End, now)
		// Release every job predicted to end by then before trying.
		for ; k < len(order) && max(running[order[k]].End, now) == end; k++ {
			e := running[order[k]]
			for m, a := range e.Allocs {
				trial[e.Nodes[m]].Release(a)
			}
		}
		probe := CloneNodes(trial)
		if idx := place(probe); idx != nil {
			slices.Sort(idx)
			return Reservation{Start: end, Nodes: slices.Compact(idx)}, true
		}
	}
	return Reservation{}, false
}

// Admits reports whether a job predicted to end at end may use node i
// while r stands (BackfillAdmits).
func (r Reservation) Admits(i int, end int64) bool {
	_, held := slices.BinarySearch(r.Nodes, i)
	return BackfillAdmits(held, end, r.Start)
}

// BackfillAdmits is the backfill rule: a job predicted to end at end may
// use any node outside a reservation (held false), and a reserved node only
// when it is predicted to be gone by start, the reservation's start. A job
// ending exactly then is admitted: it hands the node over as the head job
// takes it.
func BackfillAdmits(held bool, end, start int64) bool {
	return !held || end <= start
}

// ReservationBinds reports whether the reservation of the job keyed holder
// restricts the job keyed job at now: only jobs after the holder in the
// order are held to it. A job ahead of the holder is tried before it, as a
// replay's pass tries it before the reservation is planned, and a job
// ahead of the holder that cannot start takes the reservation over
// (TakesReservation).
func ReservationBinds(p Params, now int64, holder, job QueueKey) bool {
	return CompareOrder(p, now, holder, job) < 0
}

// TakesReservation reports whether a job keyed job, arrived at arrived,
// that cannot start at now is the one the reservation is planned for:
// reservations are on, it has waited its threshold (WantsReservation) and
// no job ahead of it holds the reservation (holder nil: none is held, or
// job holds it and it is planned again). A replay plans for the first job
// of each pass that cannot start and wants one; live, where each pod is
// tried on its own, the failing job ahead of every other candidate is the
// same job.
func TakesReservation(p Params, now, arrived int64, job QueueKey, holder *QueueKey) bool {
	if !p.WantsReservation(arrived, now) {
		return false
	}
	return holder == nil || CompareOrder(p, now, job, *holder) < 0
}
