package kueuereplay

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/schedloop/schedloop/internal/scoring"
)

// QuotaChange moves one ClusterQueue's nominal quota of one flavour-resource.
type QuotaChange struct {
	Queue string
	FR    scoring.FlavorResource
	From  int64
	To    int64
}

// Recommendation is a proposed set of nominal quota changes with the replay
// evidence for it. It is published for an operator to apply; nothing here
// writes to a cluster.
type Recommendation struct {
	Changes []QuotaChange
	// WaitBefore and WaitAfter are the workloads' total time waiting for
	// quota in the replay under the current and the proposed quotas.
	WaitBefore, WaitAfter time.Duration
	// QueueWaitBefore and QueueWaitAfter split those totals per ClusterQueue.
	QueueWaitBefore, QueueWaitAfter map[string]time.Duration
	// Patch holds one `kubectl patch clusterqueue` command per changed
	// queue, or is empty when no change helps.
	Patch string
	// Proposed is the cohort with Changes made, for replays under it.
	Proposed scoring.KueueCohort
}

// RecommendOptions bound the search.
type RecommendOptions struct {
	// Step is the quota moved per move; 0 means 1.
	Step int64
	// Steps overrides Step per resource: quotas of cpu, memory and GPUs are
	// counted in units of their own, so one step cannot fit them all.
	Steps map[string]int64
	// MaxMoves bounds the greedy search; 0 means 8.
	MaxMoves int
	// MinGain is the fraction of the current total wait a move must remove
	// to be taken; 0 means 0.01.
	MinGain     float64
	FairSharing bool
}

// Recommend searches for nominal quota moves between ClusterQueues of the
// same cohort, keeping each cohort's total, that cut the workloads' total
// time waiting for quota when wls are replayed: greedily, one Step at a
// time, taking the move that cuts it most while a move cuts at least MinGain
// of it. Moving quota rather than adding it keeps the proposal within what
// the cluster has. A move that helps only together with a second one is not
// found, so Step should be the size of the jobs that wait (a gang's GPUs).
// cohort is not changed.
func Recommend(cohort scoring.KueueCohort, wls []Workload, o RecommendOptions) (Recommendation, error) {
	if o.Step <= 0 {
		o.Step = 1
	}
	if o.MaxMoves <= 0 {
		o.MaxMoves = 8
	}
	if o.MinGain <= 0 {
		o.MinGain = 0.01
	}
	// A workload never admitted stops counting its wait at the replay's
	// last event, so taking all of a queue's quota would look like a cut:
	// a move must leave every workload admitted that was admitted before.
	var admitted int
	queueOf := map[string]string{}
	for _, w := range wls {
		queueOf[w.Key] = w.Queue
	}
	replay := func(c scoring.KueueCohort) (time.Duration, map[string]time.Duration, error) {
		res, err := Replay(Clone(c), wls, o.FairSharing)
		if err != nil {
			return 0, nil, err
		}
		got := map[string]bool{}
		for _, ev := range res.Events {
			if ev.Kind == Admitted {
				got[ev.Key] = true
			}
		}
		admitted = len(got)
		perQueue := map[string]time.Duration{}
		var total time.Duration
		for k, d := range res.QuotaWait {
			total += d
			perQueue[queueOf[k]] += d
		}
		return total, perQueue, nil
	}
	before, beforeQ, err := replay(cohort)
	if err != nil {
		return Recommendation{}, err
	}
	admittedBefore := admitted
	rec := Recommendation{WaitBefore: before, WaitAfter: before, QueueWaitBefore: beforeQ, QueueWaitAfter: beforeQ}
	cur := Clone(cohort)
	for range o.MaxMoves {
		bestWait, bestQ := rec.WaitAfter, rec.QueueWaitAfter
		var best scoring.KueueCohort
		for _, donor := range cur {
			for _, fr := range sortedFRs(donor.Quotas) {
				step := o.Step
				if s, ok := o.Steps[fr.Resource]; ok && s > 0 {
					step = s
				}
				if donor.Cohort == "" || donor.Quotas[fr].Nominal < step {
					continue
				}
				for _, recv := range cur {
					if recv == donor || recv.Cohort != donor.Cohort {
						continue
					}
					if _, ok := recv.Quotas[fr]; !ok {
						continue
					}
					cand := Clone(cur)
					move(cand, donor.Name, recv.Name, fr, step)
					w, q, err := replay(cand)
					if err != nil {
						return Recommendation{}, err
					}
					if w < bestWait && admitted >= admittedBefore {
						bestWait, bestQ, best = w, q, cand
					}
				}
			}
		}
		if best == nil || float64(rec.WaitAfter-bestWait) < o.MinGain*float64(rec.WaitAfter) {
			break
		}
		cur, rec.WaitAfter, rec.QueueWaitAfter = best, bestWait, bestQ
	}
	for i, q := range cohort {
		for _, fr := range sortedFRs(q.Quotas) {
			if from, to := q.Quotas[fr].Nominal, cur[i].Quotas[fr].Nominal; from != to {
				rec.Changes = append(rec.Changes, QuotaChange{Queue: q.Name, FR: fr, From: from, To: to})
			}
		}
	}
	rec.Proposed = cur
	rec.Patch, err = patch(cur, rec.Changes)
	return rec, err
}

func move(c scoring.KueueCohort, from, to string, fr scoring.FlavorResource, step int64) {
	for _, q := range c {
		switch q.Name {
		case from:
			v := q.Quotas[fr]
			v.Nominal -= step
			q.Quotas[fr] = v
		case to:
			v := q.Quotas[fr]
			v.Nominal += step
			q.Quotas[fr] = v
		}
	}
}

// Clone copies a cohort deeply enough that a replay of the copy leaves the
// original's usage and quotas alone.
func Clone(c scoring.KueueCohort) scoring.KueueCohort {
	out := make(scoring.KueueCohort, len(c))
	for i, q := range c {
		cp := *q
		cp.Quotas = maps.Clone(q.Quotas)
		cp.Usage = maps.Clone(q.Usage)
		out[i] = &cp
	}
	return out
}

func sortedFRs(m map[scoring.FlavorResource]scoring.KueueQuota) []scoring.FlavorResource {
	return slices.SortedFunc(maps.Keys(m), func(a, b scoring.FlavorResource) int {
		return cmp.Or(cmp.Compare(a.Flavor, b.Flavor), cmp.Compare(a.Resource, b.Resource))
	})
}

// patch writes a merge patch of spec.resourceGroups for each changed queue.
// A merge patch replaces the list whole, so it carries all of the queue's
// flavours and resources, as one resource group covering them: a queue
// whose resources are split over several groups must have the numbers
// copied into its own groups instead.
func patch(c scoring.KueueCohort, changes []QuotaChange) (string, error) {
	changed := map[string]bool{}
	for _, ch := range changes {
		changed[ch.Queue] = true
	}
	var b strings.Builder
	for _, q := range c {
		if !changed[q.Name] {
			continue
		}
		var covered []string
		byFlavor := map[string][]map[string]any{}
		for _, fr := range sortedFRs(q.Quotas) {
			qq := q.Quotas[fr]
			r := map[string]any{"name": fr.Resource, "nominalQuota": qq.Nominal}
			if qq.BorrowingLimit != nil {
				r["borrowingLimit"] = *qq.BorrowingLimit
			}
			if qq.LendingLimit != nil {
				r["lendingLimit"] = *qq.LendingLimit
			}
			byFlavor[fr.Flavor] = append(byFlavor[fr.Flavor], r)
			if !slices.Contains(covered, fr.Resource) {
				covered = append(covered, fr.Resource)
			}
		}
		var flavors []map[string]any
		for _, f := range slices.Sorted(maps.Keys(byFlavor)) {
			flavors = append(flavors, map[string]any{"name": f, "resources": byFlavor[f]})
		}
		slices.Sort(covered)
		body := map[string]any{"spec": map[string]any{"resourceGroups": []any{
			map[string]any{"coveredResources": covered, "flavors": flavors},
		}}}
		js, err := yaml.Marshal(body)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "# ClusterQueue %s\nkubectl patch clusterqueue %s --type merge --patch-file /dev/stdin <<'EOF'\n%sEOF\n", q.Name, q.Name, js)
	}
	return b.String(), nil
}
