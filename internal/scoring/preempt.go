package scoring

import (
	"cmp"
	"slices"
	"strings"
)

// Preemption is schedloop's own rule, applied live by the SchedloopPreemption
// plugin and replayed by the simulator. When a lone pod fits no node, each
// node is asked which running jobs of lower priority to evict so the pod
// fits there (PreemptOnNode), and the node whose answer loses least is
// chosen (BetterPreemption). The rule differs from kube-scheduler's
// DefaultPreemption in three ways:
//
//   - Victims are whole jobs. Evicting one member of a gang evicts all its
//     pods on every node: a gang that lost a member cannot make progress,
//     and leaving the rest running would only hold their GPUs idle.
//   - Victims are chosen to lose the fewest GPU-hours (GPUs held × time run
//     so far, over the whole job), not by priority first.
//   - Never a job marked non-preemptible, never one younger than
//     Params.PreemptMinRunTime (Preemptible).
//
// Only a lone pod preempts (PreemptsFor): a gang preemptor would need the
// victims of its whole placement chosen at once, which the rule does not
// yet do; a gang waits for room instead.
//
// Times are nanoseconds on one clock (Unix time live, the replay's clock in
// the simulator) and are compared in whole seconds, because a pod's start
// time is recorded to the second.

// PreemptsFor reports whether a pod of a job of members pods that fits
// nowhere may evict lower-priority jobs: only a lone pod (members <= 1)
// may. The scheduler asks for preemption one pod at a time; for a member
// of a gang that would empty GPUs for a gang that may still not start.
func PreemptsFor(members int) bool { return members <= 1 }

// Preemptible reports whether a running job that started at started may be
// a preemption victim at now: never a job marked non-preemptible, never one
// that has run for less than PreemptMinRunTime (a job evicted just after
// it started loses little, but a cluster that keeps doing it never
// finishes anything). Run time is counted in whole seconds (see Seconds).
func (p Params) Preemptible(started, now int64, nonPreemptible bool) bool {
	return !nonPreemptible && (Seconds(now)-Seconds(started))*1e9 >= int64(p.PreemptMinRunTime)
}

// Seconds is t (nanoseconds) in whole seconds, rounded down.
func Seconds(t int64) int64 {
	s := t / 1e9
	if t < 0 && t%1e9 != 0 {
		s--
	}
	return s
}

// VictimJob is a running job preemption may evict: a lone pod, or a gang
// with all its members. It is evicted whole or not at all.
type VictimJob struct {
	// Name identifies the job (a gang's namespace/name, a lone pod's
	// namespace/name); it breaks the last tie between victim sets.
	Name string
	// Priority is the job's priority; for a gang the highest of its
	// members'. Only a preemptor of strictly higher priority evicts it.
	Priority int32
	// Started is when the job started running (nanoseconds); for a gang
	// its earliest member's start.
	Started int64
	// NonPreemptible marks a job never evicted; a gang is non-preemptible
	// when any member is marked.
	NonPreemptible bool
	// GPUMilli is what the whole job holds, every member on every node.
	// Zero for a job without GPUs: it loses no GPU-hours.
	GPUMilli int64
}

// Lost is the GPU time j loses if evicted at now, in milli-GPU-seconds:
// GPUMilli × whole seconds run (zero for a job that has not run a second,
// or whose start lies after now).
func (j VictimJob) Lost(now int64) int64 {
	return j.GPUMilli * max(Seconds(now)-Seconds(j.Started), 0)
}

// ExactVictimSearch is how many eligible jobs on one node PreemptOnNode
// searches exhaustively; above it, it reprieves greedily.
const ExactVictimSearch = 12

// PreemptionChoice is one node's answer to PreemptOnNode.
type PreemptionChoice struct {
	Node string
	// Victims index the jobs PreemptOnNode was given, ascending.
	Victims []int
	// Lost is the GPU time the victims lose together, in milli-GPU-seconds.
	Lost int64
	// Highest is the highest victim priority; EarliestStart the earliest
	// victim start, in whole seconds.
	Highest       int32
	EarliestStart int64
	// Names are the victims' names, sorted.
	Names []string
}

// BetterPreemption reports whether a is preferred to b: fewer GPU-hours
// lost, then fewer victim jobs, then a lower highest victim priority, then
// a later earliest victim start (the oldest victim has run less), then
// the victims' names (sorted, compared in order), then the node's name.
func BetterPreemption(a, b PreemptionChoice) bool {
	switch {
	case a.Lost != b.Lost:
		return a.Lost < b.Lost
	case len(a.Victims) != len(b.Victims):
		return len(a.Victims) < len(b.Victims)
	case a.Highest != b.Highest:
		return a.Highest < b.Highest
	case a.EarliestStart != b.EarliestStart:
		return a.EarliestStart > b.EarliestStart
	}
	if c := slices.Compare(a.Names, b.Names); c != 0 {
		return c < 0
	}
	return a.Node < b.Node
}

// PreemptOnNode chooses the running jobs to evict so that a pod asking r at
// priority fits n: among the jobs with pods on n (jobs, with here[k] what
// jobs[k]'s pods hold on n), only those of lower priority that are
// Preemptible at now, and among their sets that make room, the one
// BetterPreemption prefers. ok is false when r fits n already, or when
// evicting every eligible job would not make room. n is left unchanged.
//
// Up to ExactVictimSearch eligible jobs every set is tried. Above that the
// search starts from evicting them all and reprieves the one losing most
// first, keeping each reprieve that still lets r fit: the result loses no
// job it does not need, though a cheaper set may exist.
func (p Params) PreemptOnNode(n *Node, r Request, priority int32, now int64, jobs []VictimJob, here [][]Allocation) (PreemptionChoice, bool) {
	if n.Fit(r) == Fits {
		return PreemptionChoice{}, false
	}
	var eligible []int
	for k, j := range jobs {
		if j.Priority < priority && len(here[k]) > 0 && p.Preemptible(j.Started, now, j.NonPreemptible) {
			eligible = append(eligible, k)
		}
	}
	if len(eligible) == 0 || !fitsWithout(n, r, here, eligible) {
		return PreemptionChoice{}, false
	}
	choose := func(set []int) PreemptionChoice {
		c := PreemptionChoice{Node: n.Name, Victims: slices.Clone(set)}
		for i, k := range set {
			j := jobs[k]
			c.Lost += j.Lost(now)
			if i == 0 || j.Priority > c.Highest {
				c.Highest = j.Priority
			}
			if s := Seconds(j.Started); i == 0 || s < c.EarliestStart {
				c.EarliestStart = s
			}
			c.Names = append(c.Names, j.Name)
		}
		slices.Sort(c.Victims)
		slices.Sort(c.Names)
		return c
	}
	if len(eligible) <= ExactVictimSearch {
		var best PreemptionChoice
		found := false
		set := make([]int, 0, len(eligible))
		for mask := 1; mask < 1<<len(eligible); mask++ {
			set = set[:0]
			for b, k := range eligible {
				if mask&(1<<b) != 0 {
					set = append(set, k)
				}
			}
			c := choose(set)
			if found && !BetterPreemption(c, best) {
				continue
			}
			if fitsWithout(n, r, here, set) {
				best, found = c, true
			}
		}
		return best, found
	}
	// Reprieve the job losing most first, ties the reverse of the victim
	// order: higher priority, earlier start, then name.
	order := slices.Clone(eligible)
	slices.SortStableFunc(order, func(a, b int) int {
		ja, jb := jobs[a], jobs[b]
		switch {
		case ja.Lost(now) != jb.Lost(now):
			return cmp.Compare(jb.Lost(now), ja.Lost(now))
		case ja.Priority != jb.Priority:
			return cmp.Compare(jb.Priority, ja.Priority)
		case Seconds(ja.Started) != Seconds(jb.Started):
			return cmp.Compare(Seconds(ja.Started), Seconds(jb.Started))
		}
		return strings.Compare(ja.Name, jb.Name)
	})
	trial := n.Clone()
	for _, k := range eligible {
		for _, a := range here[k] {
			trial.Release(a)
		}
	}
	var victims []int
	for _, k := range order {
		back := trial.Clone()
		ok := true
		for _, a := range here[k] {
			if !reAllocate(back, a) {
				ok = false
				break
			}
		}
		if ok && back.Fit(r) == Fits {
			trial = back
			continue
		}
		victims = append(victims, k)
	}
	return choose(victims), true
}

// fitsWithout reports whether r fits n once the pods of the jobs in set
// (what here says they hold on n) are gone.
func fitsWithout(n *Node, r Request, here [][]Allocation, set []int) bool {
	trial := n.Clone()
	for _, k := range set {
		for _, a := range here[k] {
			trial.Release(a)
		}
	}
	return trial.Fit(r) == Fits
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
