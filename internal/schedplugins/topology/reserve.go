package topology

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
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
// bound) plus its predicted run time; other gangs' members waiting at
// Permit keep what they hold, as a replay's partly placed gangs do, and the
// job's own are free for it from now. The job is placed
// on each trial cluster as the simulator's planner places it: a lone pod
// on the scorer's best node, a gang of its PodGroup's minMember by
// scoring.PlaceGang within its required level.
func (t *Topology) planReservation(state fwk.CycleState, pod *v1.Pod, now time.Time) (nodes []string, start, next time.Time, ok bool) {
	if t.handle == nil {
		return nil, time.Time{}, time.Time{}, false
	}
	nis, err := t.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return nil, time.Time{}, time.Time{}, false
	}
	type runningJob struct {
		id     string
		nodes  []int
		allocs []scoring.Allocation
		start  time.Time
		run    time.Duration
	}
	byJob := map[string]*runningJob{}
	head := reservation.JobOf(pod)
	var views []*scoring.Node
	for _, ni := range nis {
		if ni.Node() == nil {
			continue
		}
		n, held := nodeview.NodeHeld(ni, t.args.Levels, t.dra)
		i := len(views)
		views = append(views, n)
		for _, h := range held {
			id := reservation.JobOf(h.Pod)
			at, bound := t.book.Bound(h.Pod.UID)
			run := time.Duration(-1)
			if !bound {
				switch {
				case id == head:
					// The job's own members waiting at Permit are its own:
					// free for it from now (scoring.PlanReservation).
					at, run = now, 0
				case t.handle.GetWaitingPod(h.Pod.UID) != nil:
					continue
				default:
					// Assumed and being bound: it starts now.
					at = now
				}
			}
			j := byJob[id]
			if j == nil {
				if run < 0 {
					run = t.book.RunTime(h.Pod)
				}
				j = &runningJob{id: id, run: run}
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
		end := j.start.Add(j.run)
		running[k] = scoring.Ending{Nodes: j.nodes, Allocs: j.allocs, End: end.UnixNano()}
		if end.After(now) && (next.IsZero() || end.Before(next)) {
			next = end
		}
	}

	req := podspec.RequestWith(pod, t.dra)
	members, level := 1, -1
	if _, _, gang := podspec.GangKey(pod); gang && t.mgr != nil {
		group, err := t.mgr.Group(pod)
		if err != nil {
			return nil, time.Time{}, time.Time{}, false
		}
		members = group.MinMember
		level, _ = t.requiredLevel(pod, group.TopologyKey)
	}
	_, _, s := t.scorer(state, pod)
	s.Plan = nil
	res, ok := scoring.PlanReservation(views, running, now.UnixNano(), func(trial []*scoring.Node) []int {
		return scoring.PlaceTrialJob(trial, req, members, len(t.args.Levels), level, *s)
	})
	if !ok {
		return nil, time.Time{}, time.Time{}, false
	}
	nodes = make([]string, len(res.Nodes))
	for k, i := range res.Nodes {
		nodes[k] = views[i].Name
	}
	return nodes, time.Unix(0, res.Start), next, true
}

// planState stands for everything planReservation reads of the cluster,
// so that the book plans again when it changes (reservation.Book.For): each
// node's generation, the pods on the node and which of them wait at
// Permit. The generation alone (the scheduler's cache gives each change to
// a node or its pods a new one) misses two changes a plan sees: the
// scheduler's pod-group cycle assumes its trial members in the snapshot
// and takes them back keeping each node's generation
// (Snapshot.AssumePod, ForgetPod), so a plan made during a trial held
// members that are gone, and one made before it misses members that are
// there; and a member let go from Permit changes nothing in the cache,
// though a plan counts a waiting member of another gang as holding
// nothing it could free. Sums, not a running hash, so the order the
// snapshot lists nodes and pods in does not matter.
func (t *Topology) planState(nis []fwk.NodeInfo) uint64 {
	var sum uint64
	for _, ni := range nis {
		node := ni.Node()
		if node == nil {
			continue
		}
		var pods uint64
		for _, p := range ni.GetPods() {
			pod := p.GetPod()
			waiting := byte(0)
			if t.handle != nil && t.handle.GetWaitingPod(pod.UID) != nil {
				waiting = 1
			}
			h := fnv.New64a()
			h.Write([]byte(pod.UID))
			h.Write([]byte{waiting})
			pods += h.Sum64()
		}
		h := fnv.New64a()
		h.Write([]byte(node.Name))
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(ni.GetGeneration())))
		h.Write(binary.LittleEndian.AppendUint64(nil, pods))
		sum += h.Sum64()
	}
	return sum
}
