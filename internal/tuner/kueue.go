package tuner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/kueuereplay"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
)

// RecommendKueueQuota proposes nominal quota moves between the ClusterQueues
// of Kueue in front of w (kueuereplay.Recommend, moving per step the most
// common ask of a resource by a job behind Kueue) and replays w behind Kueue under base
// before and after them, for the mean wait to start as evidence beside
// Kueue's own time waiting for quota. The proposal is published for an
// operator to apply (its Patch); nothing here writes to a cluster.
//
// Every replay here, the current quota's included, lets Kueue's flavour
// assigner choose each job's flavours from what it asks (Assignable): a
// quota change moves jobs between flavours (fall-through), and the flavours
// history recorded were chosen under the quota of their time, which may not
// be the current one. The evaluator's replays of history keep the recorded
// flavours: they change scheduler parameters, not quota.
func RecommendKueueQuota(ctx context.Context, w Workload, base sim.Config, now time.Time) (schedloop.KueueQuotaRecommendation, error) {
	if w.Kueue == nil {
		return schedloop.KueueQuotaRecommendation{}, errors.New("kueue quota: no Kueue in front of the workload (no ClusterQueues stored)")
	}
	kueue := Assignable(w.Kueue)
	var wls []kueuereplay.Workload
	asks := map[string]map[int64]int{}
	for _, j := range w.Jobs {
		kj, ok := kueue.Jobs[j.Name]
		if !ok {
			continue
		}
		wls = append(wls, kueuereplay.Workload{Key: j.Name, Queue: kj.Queue, Ask: kj.Ask, Priority: j.Priority,
			Arrive: time.Time{}.Add(j.Arrival), Run: j.Duration})
		for r, v := range kj.Ask {
			if asks[r] == nil {
				asks[r] = map[int64]int{}
			}
			asks[r][v]++
		}
	}
	if len(wls) == 0 {
		return schedloop.KueueQuotaRecommendation{}, errors.New("kueue quota: no replayed job has a Workload in a stored ClusterQueue")
	}
	// Per resource, the most common ask, the larger on a tie: a move
	// smaller than the jobs that wait admits none of them.
	steps := map[string]int64{}
	for r, n := range asks {
		steps[r] = slices.MaxFunc(slices.Collect(maps.Keys(n)), func(a, b int64) int { return cmp.Or(cmp.Compare(n[a], n[b]), cmp.Compare(a, b)) })
	}
	rec, err := kueuereplay.Recommend(kueue.Cohort, wls, kueuereplay.RecommendOptions{Steps: steps, FairSharing: kueue.FairSharing})
	if err != nil {
		return schedloop.KueueQuotaRecommendation{}, fmt.Errorf("kueue quota: %w", err)
	}
	out := schedloop.KueueQuotaRecommendation{Created: now, Jobs: len(wls), Patch: rec.Patch,
		QuotaWaitBeforeS: rec.WaitBefore.Seconds(), QuotaWaitAfterS: rec.WaitAfter.Seconds()}
	for _, ch := range rec.Changes {
		out.Changes = append(out.Changes, schedloop.KueueQuotaChange{ClusterQueue: ch.Queue, Flavor: ch.FR.Flavor, Resource: ch.FR.Resource, From: ch.From, To: ch.To})
	}
	for i, cohort := range []scoring.KueueCohort{kueue.Cohort, rec.Proposed} {
		front := *kueue
		front.Cohort = cohort
		cfg := base
		cfg.Kueue = &front
		res, err := sim.RunContext(ctx, w.Cluster, w.Jobs, cfg)
		if err != nil {
			return schedloop.KueueQuotaRecommendation{}, fmt.Errorf("kueue quota replay: %w", err)
		}
		if i == 0 {
			out.MeanWaitBeforeS = res.Metrics.MeanWait
		} else {
			out.MeanWaitAfterS = res.Metrics.MeanWait
		}
	}
	return out, nil
}

// Assignable is front with each job's flavours left to Kueue's flavour
// assigner: its Ask is what it asks of each resource (its Req summed over
// flavours, or its Ask as given), its Req dropped.
func Assignable(front *sim.KueueFront) *sim.KueueFront {
	out := *front
	out.Jobs = make(map[string]sim.KueueJob, len(front.Jobs))
	for name, kj := range front.Jobs {
		if kj.Ask == nil {
			kj.Ask = map[string]int64{}
			for fr, v := range kj.Req {
				kj.Ask[fr.Resource] += v
			}
		}
		kj.Req = nil
		out.Jobs[name] = kj
	}
	return &out
}
