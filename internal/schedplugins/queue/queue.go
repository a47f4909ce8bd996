// Package queue is the queue-limit plugin: pods name their queue with
// Kueue's label (kueue.x-k8s.io/queue-name), the active profile gives each
// queue a GPU limit and optionally a limit on running gangs, and PreFilter
// keeps a pod waiting with the stable reason "queue <name> at limit <n>
// GPUs" (or "queue <name> at limit <n> running gangs") while admitting it
// would exceed its queue's limit.
//
// Within a queue, pods are tried in the scheduler's queue order (priority,
// then arrival: the stock PrioritySort); a smaller pod that fits may pass a
// larger one that does not. Queues the profile does not list are unlimited.
package queue

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/reasons"
	"github.com/schedloop/schedloop/internal/schedplugins/gang/core"
	"github.com/schedloop/schedloop/internal/schedplugins/nodeview"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Name is the plugin's name in KubeSchedulerConfiguration.
const Name = "SchedloopQueue"

// Queue is the plugin.
type Queue struct {
	ledger  *ledger
	mgr     *core.Manager
	profile *profilewatch.Holder
	pods    cache.SharedIndexInformer
	// dra reads GPUs asked for through ResourceClaims (nil: none).
	dra *nodeview.DRA
}

// Activator moves pending pods to the scheduler's active queue (fwk.Handle
// is one).
type Activator interface {
	Activate(logger klog.Logger, pods map[string]*v1.Pod)
}

var (
	_ fwk.PreFilterPlugin   = &Queue{}
	_ fwk.ReservePlugin     = &Queue{}
	_ fwk.EnqueueExtensions = &Queue{}
)

// New builds the plugin; podInformer (the scheduler's) feeds the ledger
// with bound pods. mgr, when set, supplies gangs' minMember.
func New(podInformer cache.SharedIndexInformer, mgr *core.Manager, holder *profilewatch.Holder, d *nodeview.DRA) (*Queue, error) {
	q := &Queue{ledger: newLedger(), mgr: mgr, profile: holder, pods: podInformer, dra: d}
	if podInformer == nil {
		return q, nil
	}
	_, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    q.podChanged,
		UpdateFunc: func(_, cur any) { q.podChanged(cur) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				q.ledger.remove(pod.UID)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%s: watch pods: %w", Name, err)
	}
	return q, nil
}

// Name implements fwk.Plugin.
func (q *Queue) Name() string { return Name }

// WakeOnLimitChange retries schedulerName's pending pods of every queue
// whose limits a profile swap changed. The framework requeues a pod this
// plugin turned away only when a bound pod leaves; a raised limit is no
// cluster event, and without this its pods would wait for the scheduler's
// periodic flush of unschedulable pods (five minutes by default).
func (q *Queue) WakeOnLimitChange(a Activator, schedulerName string) {
	q.profile.OnSwap(func(old, cur *profilewatch.Active) {
		changed := map[string]bool{}
		for name, limit := range cur.Params.Queues {
			if prev, ok := old.Params.Queues[name]; !ok || prev != limit {
				changed[name] = true
			}
		}
		for name := range old.Params.Queues {
			if _, ok := cur.Params.Queues[name]; !ok {
				changed[name] = true
			}
		}
		if len(changed) == 0 || q.pods == nil {
			return
		}
		pending := map[string]*v1.Pod{}
		for _, obj := range q.pods.GetStore().List() {
			pod, ok := obj.(*v1.Pod)
			if ok && pod.Spec.NodeName == "" && pod.Spec.SchedulerName == schedulerName && changed[podspec.Queue(q.mgr.Effective(pod))] {
				pending[pod.Namespace+"/"+pod.Name] = pod
			}
		}
		if len(pending) > 0 {
			a.Activate(klog.Background(), pending)
		}
	})
}

// EventsToRegister: a pod leaving frees its queue's share. The hint takes
// the pod off the ledger itself: it runs within the scheduler's handling of
// the event, before the woken pods are tried, whereas the ledger's own
// informer handler may run after that try, which would then see the share
// still taken and leave the pods waiting for a later event.
func (q *Queue) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete}, QueueingHintFn: q.freed},
	}, nil
}

func (q *Queue) freed(_ klog.Logger, _ *v1.Pod, oldObj, _ any) (fwk.QueueingHint, error) {
	if pod, ok := oldObj.(*v1.Pod); ok {
		q.ledger.remove(pod.UID)
	}
	return fwk.Queue, nil
}

func (q *Queue) podChanged(obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		q.ledger.remove(pod.UID)
		return
	}
	if e, ok := q.entry(pod); ok {
		q.ledger.add(pod.UID, e)
	}
}

func (q *Queue) entry(pod *v1.Pod) (entry, bool) {
	name := podspec.Queue(q.mgr.Effective(pod))
	if name == "" {
		return entry{}, false
	}
	milli := podspec.RequestWith(pod, q.dra).CountedMilli()
	e := entry{queue: name, milli: milli}
	if key, _, ok := podspec.GangKey(pod); ok {
		e.gang = key
		if q.mgr != nil {
			if g, err := q.mgr.Group(pod); err == nil {
				e.declared = int64(g.MinMember) * milli
			}
		}
	}
	return e, true
}

const stateKey fwk.StateKey = Name

type cycleEntry struct{ e entry }

func (c *cycleEntry) Clone() fwk.StateData { return c }

// PreFilter keeps the pod waiting while its queue is at its limit. The
// refusal is unresolvable by preemption: evicting pods frees no share of
// the pod's own queue unless they are in it, so preemption would
// evict lower-priority pods of other queues and the pod would still wait
// (and preempt again at its next attempt). The simulator does not preempt
// for a job its queue refuses either. The pod is retried when a pod leaves,
// as for any rejection.
func (q *Queue) PreFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	e, ok := q.entry(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	state.Write(stateKey, &cycleEntry{e: e})
	limit := profilewatch.ForCycle(state, q.profile).Params.Limit(e.queue)
	used, demand, newGang := q.ledger.extra(e)
	switch scoring.QueueCheck(limit, used, demand, newGang) {
	case scoring.QueueAtGPULimit:
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasons.QueueAtLimit(e.queue, limit.MaxGPUs))
	case scoring.QueueAtGangLimit:
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasons.QueueAtGangLimit(e.queue, limit.MaxRunningGangs))
	}
	return nil, nil
}

// PreFilterExtensions implements fwk.PreFilterPlugin.
func (q *Queue) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Reserve charges the pod to its queue.
func (q *Queue) Reserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ string) *fwk.Status {
	if d, err := state.Read(stateKey); err == nil {
		q.ledger.add(pod.UID, d.(*cycleEntry).e)
	}
	return nil
}

// Unreserve returns the pod's share.
func (q *Queue) Unreserve(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) {
	q.ledger.remove(pod.UID)
}
