package topology

import (
	"cmp"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/schedplugins/nodeview"
	"github.com/schedloop/schedloop/internal/schedplugins/reservation"
	"github.com/schedloop/schedloop/internal/scoring"
)

// planReservation plans the reservation of pod's job at now
// (scoring.PlanReservation) over the cycle's snapshot of every node. A
// running job ends at its last pod's bind (now for a pod assumed and being
// bound) plus its predicted run time; a gang's members waiting at Permit
// keep what they hold, as a replay's partly placed gangs do. The job is placed
// on each trial cluster as the simulator's planner places it: a lone pod
// on the scorer's best node, a gang of its PodGroup's minMember by
// scoring.PlaceGang within its required level.
func (t *Topology) planReservation(state fwk.CycleState, pod *v1.Pod, now time.Time) ([]string, time.Time, bool) {
	if t.handle == nil {
		return nil, time.Time{}, false
	}
	nis, err := t.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return nil, time.Time{}, false
	}
	type runningJob struct {
		id     string
		nodes  []int
		allocs []scoring.Allocation
		start  time.Time
		run    time.Duration
	}
	byJob := map[string]*runningJob{}
	var nodes []*scoring.Node
	for _, ni := range nis {
		if ni.Node() == nil {
			continue
		}
		n, held := nodeview.NodeHeld(ni, t.args.Levels)
		i := len(nodes)
		nodes = append(nodes, n)
		for _, h := range held {
			at, bound := t.book.Bound(h.Pod.UID)
			if !bound {
				if t.handle.GetWaitingPod(h.Pod.UID) != nil {
					continue
				}
				// Assumed and being bound: it starts now.
				at = now
			}
			id := reservation.JobOf(h.Pod)
			j := byJob[id]
			if j == nil {
				j = &runningJob{id: id, run: t.book.RunTime(h.Pod)}
				byJob[id] = j
			}
			j.nodes, j.allocs = append(j.nodes, i), append(j.allocs, h.Alloc)
			if at.After(j.start) {
				j.start = at
			}
		}
	}
	jobs := make([]*runningJob, 0, len(byJob))
	for _, j := range byJob {
		jobs = append(jobs, j)
	}
	slices.SortFunc(jobs, func(a, b *runningJob) int { return cmp.Compare(a.id, b.id) })
	running := make([]scoring.Ending, len(jobs))
	for k, j := range jobs {
		running[k] = scoring.Ending{Nodes: j.nodes, Allocs: j.allocs, End: j.start.Add(j.run).UnixNano()}
	}

	req := podspec.Request(pod)
	members, level := 1, -1
	if _, _, gang := podspec.GangKey(pod); gang && t.mgr != nil {
		group, err := t.mgr.Group(pod)
		if err != nil {
			return nil, time.Time{}, false
		}
		members = group.MinMember
		level, _ = t.requiredLevel(pod, group.TopologyKey)
	}
	_, _, s := t.scorer(state, pod)
	s.Plan = nil
	res, ok := scoring.PlanReservation(nodes, running, now.UnixNano(), func(trial []*scoring.Node) []int {
		return scoring.PlaceTrialJob(trial, req, members, len(t.args.Levels), level, *s)
	})
	if !ok {
		return nil, time.Time{}, false
	}
	names := make([]string, len(res.Nodes))
	for k, i := range res.Nodes {
		names[k] = nodes[i].Name
	}
	return names, time.Unix(0, res.Start), true
}
