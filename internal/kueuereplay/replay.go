// Package kueuereplay replays Kueue's admission of workloads to the
// ClusterQueues of a cohort on a virtual clock: when each workload gets
// quota, which borrowers are evicted to give quota back, and how long each
// waited for quota. A replay with Kueue in front of the scheduler runs it
// first; what it admits is what the scheduler then places.
//
// It holds no quota rule of its own: what fits, the order of a cycle's heads
// and the reclaim victims are internal/scoring's (kueue.go), so they mean
// the same wherever they are used. It must not place pods on nodes, read
// the cluster or the database.
package kueuereplay

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Workload is one job as Kueue sees it: the ClusterQueue its LocalQueue
// points to, what it asks, and how long it runs once admitted. Ask is what
// it asks of each resource (any resource its ClusterQueue covers: GPUs, CPU,
// other extended resources), the flavours chosen at each admission attempt
// as Kueue chooses them (scoring's AssignFlavors); nil Ask takes Req as the
// flavours already chosen, fixed.
type Workload struct {
	Key      string
	Queue    string
	Ask      map[string]int64
	Req      map[scoring.FlavorResource]int64
	Priority int32
	Arrive   time.Time
	Run      time.Duration
}

// Kind is what happened to a workload.
type Kind string

const (
	Admitted Kind = "admitted"
	Evicted  Kind = "evicted"
	Finished Kind = "finished"
)

// Event is one admission, eviction or finish, in the order they happen.
type Event struct {
	At    time.Time
	Key   string
	Queue string
	Kind  Kind
	// Borrowing is true when the admission took the queue past its nominal quota.
	Borrowing bool
	// By names the workload an eviction made room for.
	By string
	// Flavors is, for an admission, the flavour each resource was given.
	Flavors map[string]string
}

// Result is a replay's events and each workload's time spent waiting for
// quota (from arrival, and again from each eviction, to admission). A
// workload still waiting at the end is counted up to its last event time.
type Result struct {
	Events    []Event
	QuotaWait map[string]time.Duration
}

type state struct {
	w Workload
	// req is the flavours of the workload's last admission attempt.
	req      map[scoring.FlavorResource]int64
	queue    *scoring.KueueClusterQueue
	waitFrom time.Time
	running  bool
	ends     time.Time
	admitted time.Time
	done     bool
}

// Replay admits wls to the ClusterQueues of cohort as Kueue would. Queues
// must name the ClusterQueues' Names; their Usage is the starting usage and
// is changed by the replay. With fairSharing the heads of a cycle are
// ordered by dominant resource share as well. An eviction and the admission
// it makes room for happen at the same instant: Kueue admits the preemptor
// once the victims are gone, which the replay does not model as time.
func Replay(cohort scoring.KueueCohort, wls []Workload, fairSharing bool) (Result, error) {
	byName := map[string]*scoring.KueueClusterQueue{}
	for _, q := range cohort {
		byName[q.Name] = q
	}
	states := make([]*state, 0, len(wls))
	seen := map[string]bool{}
	for _, w := range wls {
		q, ok := byName[w.Queue]
		if !ok {
			return Result{}, fmt.Errorf("workload %s: queue %q is not a ClusterQueue of the cohort", w.Key, w.Queue)
		}
		if seen[w.Key] {
			return Result{}, fmt.Errorf("workload %s: key repeated", w.Key)
		}
		if w.Run <= 0 {
			return Result{}, fmt.Errorf("workload %s: run %v, want > 0", w.Key, w.Run)
		}
		seen[w.Key] = true
		states = append(states, &state{w: w, queue: q, waitFrom: w.Arrive, req: w.Req})
	}
	res := Result{QuotaWait: map[string]time.Duration{}}
	arrived := func(s *state, now time.Time) bool { return !s.w.Arrive.After(now) }

	var last time.Time
	for started := false; ; started = true {
		now, ok := nextTime(states, last, !started)
		if !ok {
			break
		}
		last = now
		// Finishes first: their quota is free for this instant's admissions.
		for _, s := range states {
			if s.running && !s.ends.After(now) {
				s.running, s.done = false, true
				s.queue.Release(s.req)
				res.Events = append(res.Events, Event{At: s.ends, Key: s.w.Key, Queue: s.w.Queue, Kind: Finished})
			}
		}
		// Admission cycles until one admits nothing. A head that fits
		// nowhere is passed over for the rest of the instant and the next
		// in its queue tries (BestEffortFIFO, Kueue's default).
		passed := map[*state]bool{}
		for {
			heads := map[*scoring.KueueClusterQueue]*state{}
			for _, s := range states {
				if s.running || s.done || passed[s] || !arrived(s, now) {
					continue
				}
				if h, ok := heads[s.queue]; !ok || queueLess(s, h) {
					heads[s.queue] = s
				}
			}
			if len(heads) == 0 {
				break
			}
			// Each head's flavours are chosen against the usage of now, as
			// Kueue nominates them before ordering the cycle.
			entries := make([]scoring.KueueEntry, 0, len(heads))
			byKey := map[string]*state{}
			for _, h := range heads {
				if h.w.Ask != nil {
					req, mode := cohort.AssignFlavors(h.queue, h.w.Ask, running(states))
					if mode == scoring.KueueNoFit {
						passed[h] = true
						continue
					}
					h.req = req
				}
				entries = append(entries, scoring.KueueEntry{Key: h.w.Key, Queue: h.queue, Req: h.req, Priority: h.w.Priority, Created: h.w.Arrive})
				byKey[h.w.Key] = h
			}
			cohort.KueueOrder(entries, fairSharing)
			admittedOne := false
			for _, e := range entries {
				s := byKey[e.Key]
				if !cohort.Fits(s.queue, s.req) {
					victims := cohort.Reclaim(s.queue, s.req, running(states))
					if victims == nil {
						passed[s] = true
						continue
					}
					for _, v := range victims {
						vs := find(states, v.Key)
						vs.running, vs.waitFrom = false, now
						vs.queue.Release(vs.req)
						res.Events = append(res.Events, Event{At: now, Key: vs.w.Key, Queue: vs.w.Queue, Kind: Evicted, By: s.w.Key})
					}
				}
				borrowing := cohort.Borrows(s.queue, s.req)
				s.queue.Admit(s.req)
				s.running, s.admitted, s.ends = true, now, now.Add(s.w.Run)
				res.QuotaWait[s.w.Key] += now.Sub(s.waitFrom)
				flavors := map[string]string{}
				for fr := range s.req {
					flavors[fr.Resource] = fr.Flavor
				}
				res.Events = append(res.Events, Event{At: now, Key: s.w.Key, Queue: s.w.Queue, Kind: Admitted, Borrowing: borrowing, Flavors: flavors})
				admittedOne = true
				// Heads are reconsidered after each admission: usage moved.
				break
			}
			if !admittedOne {
				break
			}
		}
	}
	for _, s := range states {
		if !s.running && !s.done && !last.Before(s.waitFrom) {
			res.QuotaWait[s.w.Key] += last.Sub(s.waitFrom)
		}
	}
	return res, nil
}

// queueLess orders one ClusterQueue's pending workloads: higher priority,
// then earlier arrival, then key (Kueue's queue ordering within a
// ClusterQueue, pkg/cache/queue).
func queueLess(a, b *state) bool {
	if a.w.Priority != b.w.Priority {
		return a.w.Priority > b.w.Priority
	}
	if !a.w.Arrive.Equal(b.w.Arrive) {
		return a.w.Arrive.Before(b.w.Arrive)
	}
	return a.w.Key < b.w.Key
}

// nextTime is the earliest arrival or finish after last (or at it, for the
// first instant).
func nextTime(states []*state, last time.Time, first bool) (time.Time, bool) {
	var t time.Time
	found := false
	consider := func(c time.Time) {
		if (first && !c.Before(last)) || c.After(last) {
			if !found || c.Before(t) {
				t, found = c, true
			}
		}
	}
	for _, s := range states {
		if s.done {
			continue
		}
		if s.running {
			consider(s.ends)
		} else if first || s.w.Arrive.After(last) {
			consider(s.w.Arrive)
		}
	}
	return t, found
}

func running(states []*state) []scoring.KueueAdmitted {
	var out []scoring.KueueAdmitted
	for _, s := range states {
		if s.running {
			out = append(out, scoring.KueueAdmitted{Key: s.w.Key, Queue: s.queue, Req: s.req, Priority: s.w.Priority, Admitted: s.admitted})
		}
	}
	slices.SortFunc(out, func(a, b scoring.KueueAdmitted) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

func find(states []*state, key string) *state {
	for _, s := range states {
		if s.w.Key == key {
			return s
		}
	}
	return nil
}

// Cohort is the replay's view of stored ClusterQueues (the collector's
// reading of Kueue's objects), usage zero: Kueue's quotas as Kueue reads them,
// a nil limit no limit, FairWeight 0 the default 1, flavour fungibility as
// stored ("" Kueue's defaults).
func Cohort(qs []schedloop.KueueClusterQueue) scoring.KueueCohort {
	out := make(scoring.KueueCohort, 0, len(qs))
	for _, cq := range qs {
		q := &scoring.KueueClusterQueue{Name: cq.Name, Cohort: cq.Cohort, FairWeight: cq.FairWeight,
			WhenCanBorrow: cq.WhenCanBorrow, WhenCanPreempt: cq.WhenCanPreempt,
			PreemptionOverBorrowing: cq.FungibilityPreference == scoring.KueuePreemptionOverBorrowing,
			Quotas:                  map[scoring.FlavorResource]scoring.KueueQuota{}, Usage: map[scoring.FlavorResource]int64{}}
		for _, r := range cq.Quotas {
			q.Quotas[scoring.FlavorResource{Flavor: r.Flavor, Resource: r.Resource}] = scoring.KueueQuota{
				Nominal: r.Nominal, BorrowingLimit: r.BorrowingLimit, LendingLimit: r.LendingLimit}
		}
		q.Groups = Groups(cq.Quotas)
		out = append(out, q)
	}
	return out
}

// Groups recovers a ClusterQueue's resource groups from its quotas in spec
// order (resource groups, their flavours, each flavour's resources), as
// the collector stores them: Kueue requires every flavour of a group to
// list the group's resources and no flavour or resource to be in two
// groups, so the flavours listing the same resources are one group, tried
// in the order they appear.
func Groups(quotas []schedloop.KueueQuota) []scoring.KueueResourceGroup {
	var flavors []string
	resources := map[string][]string{}
	for _, q := range quotas {
		if _, ok := resources[q.Flavor]; !ok {
			flavors = append(flavors, q.Flavor)
		}
		resources[q.Flavor] = append(resources[q.Flavor], q.Resource)
	}
	var out []scoring.KueueResourceGroup
	for _, f := range flavors {
		i := slices.IndexFunc(out, func(g scoring.KueueResourceGroup) bool { return slices.Equal(g.Resources, resources[f]) })
		if i < 0 {
			out = append(out, scoring.KueueResourceGroup{Resources: resources[f]})
			i = len(out) - 1
		}
		out[i].Flavors = append(out[i].Flavors, f)
	}
	return out
}
