package scoring

import (
	"math"
	"slices"
)

// Preemption is modelled on kube-scheduler's DefaultPreemption, which the
// shipped scheduler profile keeps (schedloop's plugins add no preemption of
// their own): when a pod fits no node, each node is asked for the smallest
// set of lower-priority pods whose eviction would let it fit, and the node
// whose victims matter least is chosen. The simulator replays these rules;
// live, DefaultPreemption applies its own code, whose rules these are for a
// lone pod preempting pods without PodDisruptionBudgets:
//
//   - SelectVictims is selectVictimsOnNode: remove every lower-priority pod,
//     then reprieve them most important first (higher priority, then earlier
//     start), keeping each that still lets the pod fit.
//   - BetterPreemption is pickOneNodeForPreemption's order.
//
// Only a lone pod preempts (PreemptsFor): the gang plugin's PostFilter
// runs before DefaultPreemption and ends the PostFilter phase for a gang's
// member, so neither the scheduler nor the simulator evicts anything for a
// gang.
//
// What the replay does not model: DefaultPreemption breaks a tie between
// nodes equal on every criterion by map order (BetterPreemption by name),
// and on clusters over 100 nodes it dry-runs a sample of them
// (minCandidateNodesPercentage) from a random offset. It evicts only the
// pods on the chosen node; the simulator stops a victim's whole job.

// PreemptsFor reports whether a pod of a job of members pods that fits
// nowhere may evict lower-priority pods: only a lone pod (members <= 1)
// may. DefaultPreemption, asked by one member of a gang, would evict pods
// on one node for that member alone, emptying GPUs for a gang that may
// still not start; a gang waits for room instead.
func PreemptsFor(members int) bool { return members <= 1 }

// Preemptible reports whether a running job that started at started may be
// a preemption victim at now: never a job marked non-preemptible, never one
// that has run for less than PreemptMinRunTime (a job evicted just after
// it started loses little, but a cluster that keeps doing it never
// finishes anything).
func (p Params) Preemptible(started, now int64, nonPreemptible bool) bool {
	return !nonPreemptible && now-started >= int64(p.PreemptMinRunTime)
}

// Victim is a running pod that preemption may evict.
type Victim struct {
	Priority int32
	// Started orders victims of equal priority: the most recently started
	// loses least work, so it goes first (any monotone unit).
	Started int64
	Alloc   Allocation
}

// SelectVictims returns the indices (into running, which lists the pods on
// n) of the pods to evict so r fits n, or ok == false when evicting every
// pod of lower priority than priority would not be enough. Like
// DefaultPreemption it first removes every lower-priority pod, then gives
// back ("reprieves") as many as it can, highest priority first, so the
// victims are few and of low priority. n is left unchanged.
func SelectVictims(n *Node, r Request, priority int32, running []Victim) (victims []int, ok bool) {
	anyLower := false
	for _, v := range running {
		anyLower = anyLower || v.Priority < priority
	}
	if !anyLower {
		return nil, false
	}
	trial := n.Clone()
	var lower []int
	for i, v := range running {
		if v.Priority < priority {
			lower = append(lower, i)
			trial.Release(v.Alloc)
		}
	}
	if len(lower) == 0 || trial.Fit(r) != Fits {
		return nil, false
	}
	// Reprieve the most important first: higher priority, then earlier start.
	slices.SortStableFunc(lower, func(a, b int) int {
		if running[a].Priority != running[b].Priority {
			return int(running[b].Priority) - int(running[a].Priority)
		}
		switch {
		case running[a].Started < running[b].Started:
			return -1
		case running[a].Started > running[b].Started:
			return 1
		}
		return 0
	})
	for _, i := range lower {
		a := running[i].Alloc
		if reAllocate(trial, a) && trial.Fit(r) == Fits {
			continue
		}
		victims = append(victims, i)
	}
	if len(victims) == 0 {
		return nil, false // r fitted without evicting anyone
	}
	slices.Sort(victims)
	return victims, true
}

// reAllocate puts a released allocation back on n if it still fits there,
// and undoes nothing otherwise.
func reAllocate(n *Node, a Allocation) bool {
	if a.CPUMilli > n.CPUMilliFree || a.MemoryMiB > n.MemoryMiBFree {
		return false
	}
	for _, d := range a.Devices {
		if n.GPUFree[d] < a.Milli {
			return false
		}
	}
	for _, d := range a.Devices {
		n.GPUFree[d] -= a.Milli
	}
	n.CPUMilliFree -= a.CPUMilli
	n.MemoryMiBFree -= a.MemoryMiB
	return true
}

// PreemptionCandidate is one node's answer to SelectVictims, summarised for
// choosing among nodes.
type PreemptionCandidate struct {
	Node string
	// HighestPriority is the highest priority among the victims.
	HighestPriority int32
	// PrioritySum adds the victims' priorities.
	PrioritySum int64
	Victims     int
	// TopEarliestStart is the earliest start among the victims of the
	// highest priority.
	TopEarliestStart int64
}

// SummariseVictims builds the candidate for node from its victims.
func SummariseVictims(node string, running []Victim, victims []int) PreemptionCandidate {
	c := PreemptionCandidate{Node: node, Victims: len(victims)}
	for k, i := range victims {
		v := running[i]
		switch {
		case k == 0 || v.Priority > c.HighestPriority:
			c.HighestPriority, c.TopEarliestStart = v.Priority, v.Started
		case v.Priority == c.HighestPriority:
			c.TopEarliestStart = min(c.TopEarliestStart, v.Started)
		}
		// Offset as DefaultPreemption offsets each priority (MaxInt32+1),
		// so a victim of negative priority still adds to the sum and more
		// victims weigh more.
		c.PrioritySum += int64(v.Priority) + math.MaxInt32 + 1
	}
	return c
}

// BetterPreemption reports whether preempting on a is preferred to b, by
// DefaultPreemption's order: lower highest victim priority, lower sum of
// (offset) victim priorities, fewer victims, the later earliest start among
// the highest-priority victims (less work lost), then node name.
func BetterPreemption(a, b PreemptionCandidate) bool {
	switch {
	case a.HighestPriority != b.HighestPriority:
		return a.HighestPriority < b.HighestPriority
	case a.PrioritySum != b.PrioritySum:
		return a.PrioritySum < b.PrioritySum
	case a.Victims != b.Victims:
		return a.Victims < b.Victims
	case a.TopEarliestStart != b.TopEarliestStart:
		return a.TopEarliestStart > b.TopEarliestStart
	}
	return a.Node < b.Node
}
