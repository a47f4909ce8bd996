package tuner

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/kueuereplay"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
)

// JobsFromHistory turns stored jobs into a workload: arrival is creation
// relative to origin, run time is from admission (else start, else first
// binding) to finish, or to until for a job still running; for a job
// evicted and run again, from its last run's start (Job.LastRunBegan), as
// the replay runs an evicted job again whole and would otherwise run the
// lost run and the second wait as well; a job that began
// at or after until is left out, so a window reads the same later as it did
// at until. Each member asks
// for the stored request shape (GPUs, CPU, memory, GPU models); the store
// does not record utilisation, so util applies to every job.
func JobsFromHistory(jobs []schedloop.Job, origin, until time.Time, util float64) []sim.Job {
	out := make([]sim.Job, 0, len(jobs))
	for _, j := range jobs {
		began := firstSet(j.Admitted, j.Started, j.FirstScheduled)
		if began.IsZero() || !began.Before(until) {
			// Not running by until: read later, the same window must
			// replay the same jobs.
			continue
		}
		end := j.Finished
		if end.IsZero() || end.After(until) {
			end = until
		}
		if last := j.LastRunBegan; last.After(began) && last.Before(end) {
			began = last
		}
		sj := JobOf(j, util)
		sj.Arrival, sj.Duration = max(j.Created.Sub(origin), 0), max(end.Sub(began), 0)
		out = append(out, sj)
	}
	return out
}

// JobOf is a stored job as a replay sees it, without arrival or run time:
// named namespace/name, each member asking for the stored request shape.
func JobOf(j schedloop.Job, util float64) sim.Job {
	r := scoring.Request{GPUs: j.GPUsPerMember, CPUMilli: j.CPUMilliPerMember, MemoryMiB: j.MemoryMiBPerMember,
		GPUModels: slices.Clone(j.GPUModels)}
	if len(r.GPUModels) == 0 {
		r.GPUModels = nil
	}
	if j.GPUMilliPerMember > 0 && j.GPUMilliPerMember < scoring.MilliPerGPU {
		r.GPUs, r.GPUMilli = 1, j.GPUMilliPerMember
	}
	return sim.Job{Name: j.Namespace + "/" + j.Name, Members: max(j.MinMember, 1), Request: r, Queue: j.Queue,
		Priority: j.Priority, Util: util}
}

// Began is when a stored job began running: admission, else start, else
// its first binding; zero when it has not.
func Began(j schedloop.Job) time.Time { return firstSet(j.Admitted, j.Started, j.FirstScheduled) }

func firstSet(ts ...time.Time) time.Time {
	for _, t := range ts {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

// ClusterFromNodes builds the simulated cluster from the stored inventory,
// reading each node's topology values at levels (outermost first; the host
// level, if listed last, is implicit).
func ClusterFromNodes(nodes []schedloop.Node, levels []string) *sim.Cluster {
	inv := trace.Inventory{Levels: levels}
	for _, n := range nodes {
		labels := maps.Clone(n.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		maps.Copy(labels, n.Topology)
		inv.Nodes = append(inv.Nodes, trace.Node{Name: n.Name, GPUs: n.GPUCount, GPUModel: n.GPUModel,
			CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB, Labels: labels})
	}
	return sim.NewCluster(inv)
}

// JobsForImport converts a trace into job rows as if it had run on a
// cluster from origin: each job was created at its arrival, admitted at
// once and ran for its duration (a trace records run times, not how long
// the original scheduler made jobs wait). UIDs are namespace/name.
func JobsForImport(tj []trace.Job, origin time.Time, namespace string) []schedloop.Job {
	out := make([]schedloop.Job, len(tj))
	for i, j := range tj {
		at := origin.Add(j.Arrival)
		kind := schedloop.JobKindPod
		if j.Members > 1 {
			kind = schedloop.JobKindGang
		}
		phase := schedloop.PhaseSucceeded
		if j.Outcome == trace.Failed {
			phase = schedloop.PhaseFailed
		}
		milli := 0
		if j.GPUs == 1 && j.GPUMilli > 0 && j.GPUMilli < scoring.MilliPerGPU {
			milli = j.GPUMilli
		}
		out[i] = schedloop.Job{UID: namespace + "/" + j.Name, Namespace: namespace, Name: j.Name, Kind: kind,
			Queue: j.Queue, Priority: j.Priority, MinMember: max(j.Members, 1), GPUsPerMember: j.GPUs,
			GPUMilliPerMember: milli, CPUMilliPerMember: j.CPUMilli, MemoryMiBPerMember: j.MemoryMiB,
			GPUModels: slices.Clone(j.GPUModels), Created: at, FirstScheduled: at, Admitted: at, Started: at,
			Finished: at.Add(j.Duration), Phase: phase}
	}
	return out
}

// NodesForImport converts an inventory into node rows; topology holds the
// inventory's level labels.
func NodesForImport(inv trace.Inventory, seen time.Time) []schedloop.Node {
	out := make([]schedloop.Node, len(inv.Nodes))
	for i, n := range inv.Nodes {
		topo := map[string]string{}
		for _, l := range inv.Levels {
			if v, ok := n.Labels[l]; ok {
				topo[l] = v
			}
		}
		out[i] = schedloop.Node{Name: n.Name, Labels: maps.Clone(n.Labels), Topology: topo, GPUModel: n.GPUModel,
			GPUCount: n.GPUs, CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB, Ready: true, FirstSeen: seen, LastSeen: seen}
	}
	return out
}

// MeasureJobs is the JCT side of a measured outcome over finished jobs:
// mean and p95 JCT, and p95 queueing delay of jobs at or above
// highPriority. Jobs that have not finished are skipped.
func MeasureJobs(jobs []schedloop.Job, highPriority int32) Values {
	var jct, hp []float64
	for _, j := range jobs {
		began := firstSet(j.Admitted, j.Started, j.FirstScheduled)
		if j.Finished.IsZero() || began.IsZero() {
			continue
		}
		jct = append(jct, j.Finished.Sub(j.Created).Seconds())
		if j.Priority >= highPriority {
			hp = append(hp, began.Sub(j.Created).Seconds())
		}
	}
	return Values{MetricMeanJCT: mean(jct), MetricP95JCT: p95(jct), MetricHighPriorityWait: p95(hp)}
}

func p95(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[max(int(math.Ceil(0.95*float64(len(v))))-1, 0)]
}

// KueueFrontFromHistory puts Kueue in front of a workload replayed from
// history: the stored ClusterQueues, and each job (named namespace/name) that
// has a stored Workload submitted to its ClusterQueue: the one it was last
// admitted to, else the one another Workload of its LocalQueue was admitted
// to; a Workload whose ClusterQueue is neither known nor stored leaves its
// job outside Kueue. A job is charged, for every resource its ClusterQueue
// sets quota on (KueueAsk: cpu, memory, GPUs, pods), what its members ask of
// it, of the flavour its Workload was assigned for that resource, else the
// first flavour its ClusterQueue has quota of it in. A resource the replay
// does not know a job's ask of (an extended resource other than GPUs) is
// not charged. Kueue's fair sharing is a setting of Kueue's own
// configuration, not of a ClusterQueue, so the caller says whether it is
// on. Nil when no ClusterQueue is stored.
func KueueFrontFromHistory(cqs []schedloop.KueueClusterQueue, wls []schedloop.KueueWorkload, jobs []sim.Job, fairSharing bool) *sim.KueueFront {
	if len(cqs) == 0 {
		return nil
	}
	// firstFlavor[queue][resource]: the flavour listed first for it.
	firstFlavor := map[string]map[string]string{}
	var resources []string
	for _, q := range cqs {
		if firstFlavor[q.Name] == nil {
			firstFlavor[q.Name] = map[string]string{}
		}
		for _, r := range q.Quotas {
			if _, ok := firstFlavor[q.Name][r.Resource]; !ok {
				firstFlavor[q.Name][r.Resource] = r.Flavor
			}
			if !slices.Contains(resources, r.Resource) {
				resources = append(resources, r.Resource)
			}
		}
	}
	byLocalQueue := map[string]string{}
	for _, w := range wls {
		if w.ClusterQueue != "" {
			byLocalQueue[w.Namespace+"/"+w.LocalQueue] = w.ClusterQueue
		}
	}
	byJob := map[string]schedloop.KueueWorkload{}
	for _, w := range wls {
		byJob[w.Namespace+"/"+w.Name] = w
	}
	front := &sim.KueueFront{Cohort: kueuereplay.Cohort(cqs), FairSharing: fairSharing, Jobs: map[string]sim.KueueJob{}}
	for _, j := range jobs {
		w, ok := byJob[j.Name]
		if !ok {
			continue
		}
		cq := cmp.Or(w.ClusterQueue, byLocalQueue[w.Namespace+"/"+w.LocalQueue])
		flavors, stored := firstFlavor[cq]
		if !stored {
			continue
		}
		req := map[scoring.FlavorResource]int64{}
		for _, r := range resources {
			flavor := cmp.Or(w.Flavors[r], flavors[r])
			ask, known := KueueAsk(j, r)
			if flavor == "" || !known || ask == 0 {
				continue
			}
			req[scoring.FlavorResource{Flavor: flavor, Resource: r}] = ask
		}
		front.Jobs[j.Name] = sim.KueueJob{Queue: cq, Req: req}
	}
	return front
}

// KueueAsk is what job asks in all of resource, in the thousandths Kueue's
// quotas are stored in (resource.Quantity's MilliValue): its members'
// requests summed, as Kueue sums a Workload's pod sets. known is false for a
// resource a replayed job does not carry.
func KueueAsk(j sim.Job, resource string) (ask int64, known bool) {
	members := int64(j.Members)
	switch resource {
	case schedloop.GPUResourceName:
		return j.DemandMilli(), true
	case "cpu":
		return members * j.Request.CPUMilli, true
	case "memory":
		return members * j.Request.MemoryMiB << 20 * 1000, true
	case "pods":
		return members * 1000, true
	}
	return 0, false
}
