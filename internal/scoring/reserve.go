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

// PlanReservation finds the earliest predicted end among running after
// which the head job fits, releasing running jobs in order of predicted
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
// while r stands: any node outside the reservation, a reserved node only
// when the job is predicted to be gone by the reservation's start.
func (r Reservation) Admits(i int, end int64) bool {
	if _, held := slices.BinarySearch(r.Nodes, i); !held {
		return true
	}
	return end <= r.Start
}
