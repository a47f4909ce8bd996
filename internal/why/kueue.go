package why

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schedloop/schedloop"
)

// QuotaIntervals are the stretches a Kueue Workload waited for quota: from
// its creation, and again from each eviction, until its quota was reserved
// (or until now while it still waits). Each is labelled with the
// ClusterQueue and, when Kueue said why, the quota it lacked.
//
// The job's pods exist meanwhile but are held by Kueue's admission gate, so
// no scheduler explains these stretches; ClipToQuota removes what the pods'
// own wait intervals say about them.
func QuotaIntervals(wl schedloop.KueueWorkload, cq *schedloop.KueueClusterQueue, now time.Time) []Interval {
	conds := slices.Clone(wl.Conditions)
	slices.SortStableFunc(conds, func(a, b schedloop.KueueCondition) int { return a.At.Compare(b.At) })
	var out []Interval
	from, waiting := wl.CreatedAt, true
	var why schedloop.KueueCondition
	queue := ""
	if wl.ClusterQueue != "" {
		queue = " in ClusterQueue " + wl.ClusterQueue
		if cq != nil && cq.Name == wl.ClusterQueue {
			queue += " (" + Borrowing(*cq, wl.Flavors) + ")"
		}
	}
	emit := func(end time.Time) {
		if !end.After(from) {
			return
		}
		label := "waiting for quota" + queue
		iv := Interval{Start: from, End: end, Seconds: end.Sub(from).Seconds(), State: "waiting",
			Category: string(schedloop.WaitQuota), Label: label}
		if why.Type != "" {
			iv.Label += fmt.Sprintf(" (%s: %s)", why.Reason, why.Message)
			iv.Message = why.Message
		}
		out = append(out, iv)
	}
	for _, c := range conds {
		switch {
		case c.Type == "QuotaReserved" && c.Status == "True":
			if waiting {
				emit(c.At)
			}
			waiting, why = false, schedloop.KueueCondition{}
		case c.Type == "QuotaReserved" && c.Status == "False":
			if !waiting {
				from, waiting = c.At, true
			}
			if c.Category == schedloop.WaitQuota {
				why = c
			}
		case (c.Type == "Evicted" || c.Type == "Preempted") && c.Status == "True":
			if !waiting {
				from, waiting = c.At, true
			}
		case c.Type == "Finished" && c.Status == "True":
			if waiting {
				emit(c.At)
			}
			return out
		}
	}
	if waiting {
		emit(now)
	}
	return out
}

// ClipToQuota drops from pod wait intervals the time quota intervals cover:
// a pod held by Kueue's gate was waiting for quota, whatever a scheduler
// did or did not say about it. An interval partly covered keeps its
// uncovered parts.
func ClipToQuota(pod, quota []Interval) []Interval {
	var out []Interval
	for _, iv := range pod {
		parts := []Interval{iv}
		for _, q := range quota {
			var next []Interval
			for _, p := range parts {
				if !p.Start.Before(q.End) || !q.Start.Before(p.End) {
					next = append(next, p)
					continue
				}
				if p.Start.Before(q.Start) {
					left := p
					left.End, left.Seconds = q.Start, q.Start.Sub(p.Start).Seconds()
					next = append(next, left)
				}
				if q.End.Before(p.End) {
					right := p
					right.Start, right.Seconds = q.End, p.End.Sub(q.End).Seconds()
					next = append(next, right)
				}
			}
			parts = next
		}
		out = append(out, parts...)
	}
	return out
}

// Borrowing says what a ClusterQueue may borrow beyond its nominal quota, for
// the flavour-resources in flavors (resource -> flavour, a Workload's
// assignment; all of the queue's when empty): "borrowing: none, no cohort",
// or "borrowing from cohort research: nvidia.com/gpu on h100 nominal 16, up
// to 8 more". Without a borrowing limit a queue may borrow all the cohort
// lends, as in Kueue's API.
func Borrowing(cq schedloop.KueueClusterQueue, flavors map[string]string) string {
	if cq.Cohort == "" {
		return "borrowing: none, no cohort"
	}
	var parts []string
	for _, q := range cq.Quotas {
		if f, ok := flavors[q.Resource]; len(flavors) > 0 && (!ok || f != q.Flavor) {
			continue
		}
		more := "as much more as the cohort lends"
		if q.BorrowingLimit != nil {
			more = "up to " + Quantity(*q.BorrowingLimit) + " more"
			if *q.BorrowingLimit == 0 {
				more = "none more"
			}
		}
		parts = append(parts, fmt.Sprintf("%s on %s nominal %s, %s", q.Resource, q.Flavor, Quantity(q.Nominal), more))
	}
	if len(parts) == 0 {
		return "borrowing from cohort " + cq.Cohort
	}
	return "borrowing from cohort " + cq.Cohort + ": " + strings.Join(parts, "; ")
}

// Quantity writes a quantity kept in thousandths in the resource's unit.
func Quantity(milli int64) string {
	return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
}
