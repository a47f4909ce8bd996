package kueue

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	kueueapi "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/kueuereplay"
	"github.com/schedloop/schedloop/internal/scoring"
)

// ReplayInput reads Kueue's own objects into kueuereplay's inputs, so a
// replay starts from exactly the quota and workloads Kueue admitted from:
// each ClusterQueue read as the collector reads it (events.KueueClusterQueueOf:
// quotas per flavour and resource in thousandths, for CPU's sake; requests
// alike, flavour fungibility included) with its resource groups from its spec,
// each Workload's requests summed per resource over its pod sets (the
// replay picks the flavours, as Kueue's flavour assigner), its priority and
// its creation as arrival, run for run. Usage starts at zero.
func ReplayInput(cqs []kueueapi.ClusterQueue, lqs []kueueapi.LocalQueue, wls []kueueapi.Workload, run time.Duration) (scoring.KueueCohort, []kueuereplay.Workload, error) {
	stored := make([]schedloop.KueueClusterQueue, len(cqs))
	for i, cq := range cqs {
		stored[i] = events.KueueClusterQueueOf(cq, time.Time{})
	}
	cohort := kueuereplay.Cohort(stored)
	for i, cq := range cqs {
		q := cohort[i]
		q.Groups = nil
		for _, rg := range cq.Spec.ResourceGroups {
			g := scoring.KueueResourceGroup{}
			for _, r := range rg.CoveredResources {
				g.Resources = append(g.Resources, string(r))
			}
			for _, f := range rg.Flavors {
				g.Flavors = append(g.Flavors, string(f.Name))
			}
			q.Groups = append(q.Groups, g)
		}
	}
	lqToCQ := map[string]string{}
	for _, lq := range lqs {
		lqToCQ[lq.Namespace+"/"+lq.Name] = string(lq.Spec.ClusterQueue)
	}
	var out []kueuereplay.Workload
	for _, wl := range wls {
		key := wl.Namespace + "/" + wl.Name
		cq, ok := lqToCQ[wl.Namespace+"/"+string(wl.Spec.QueueName)]
		if !ok {
			return nil, nil, fmt.Errorf("workload %s: LocalQueue %q not given", key, wl.Spec.QueueName)
		}
		ask := map[string]int64{}
		for _, ps := range wl.Spec.PodSets {
			for name, qty := range podRequests(ps.Template.Spec) {
				ask[string(name)] += int64(ps.Count) * qty
			}
		}
		w := kueuereplay.Workload{Key: key, Queue: cq, Ask: ask, Arrive: wl.CreationTimestamp.Time, Run: run}
		if wl.Spec.Priority != nil {
			w.Priority = *wl.Spec.Priority
		}
		out = append(out, w)
	}
	return cohort, out, nil
}

// podRequests is what one pod asks, in thousandths: its containers' requests
// summed, a limit standing for a missing request as the apiserver defaults
// it.
func podRequests(spec corev1.PodSpec) map[corev1.ResourceName]int64 {
	out := map[corev1.ResourceName]int64{}
	for _, c := range spec.Containers {
		for name, q := range c.Resources.Limits {
			if _, ok := c.Resources.Requests[name]; !ok {
				out[name] += q.MilliValue()
			}
		}
		for name, q := range c.Resources.Requests {
			out[name] += q.MilliValue()
		}
	}
	return out
}
