// Package queuesort is schedloop's QueueSort plugin: the stock order
// (higher priority first, then earlier arrival) with the members of one
// PodGroup kept together, so a gang is tried back to back. Under the stock
// order a gang's members sit wherever they arrived among other pods; each
// member placed early then holds its reservation at Permit until the last
// one is reached, and at scale gangs reach their Permit timeout, are
// released and start over.
//
// A gang sorts at the arrival of the first of its members the queue saw,
// and its members after one another. The queue needs every profile of a
// scheduler to use the same QueueSort plugin, so a configuration that adds
// profiles next to schedloop's enables this plugin in each of them (it
// reads only the pods; it keeps no other state of a profile).
//
// The comparison itself is scoring.CompareQueueKeys, the order the tuner's
// simulator replays pods in; this package only supplies each entity's key.
package queuesort

import (
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Name is the plugin's name in KubeSchedulerConfiguration.
const Name = "SchedloopQueueSort"

// IndexPodGroup indexes pods by namespace/pod-group (the same index the
// gang manager adds; whichever comes first adds it).
const IndexPodGroup = "schedloop.io/pod-group"

// Order is the queue order, shared by every profile of one scheduler.
type Order struct {
	pods cache.Indexer

	mu sync.Mutex
	// first is when the first member of each gang the queue holds entered it.
	first map[string]time.Time
}

// NewOrder builds the order over the scheduler's pod informer, which must
// not have started yet (the pod-group index is added to it). A nil informer
// gives an order that never forgets gangs, for tests.
func NewOrder(podInformer cache.SharedIndexInformer) (*Order, error) {
	o := &Order{first: map[string]time.Time{}}
	if podInformer == nil {
		return o, nil
	}
	if _, done := podInformer.GetIndexer().GetIndexers()[IndexPodGroup]; !done {
		if err := podInformer.AddIndexers(cache.Indexers{IndexPodGroup: indexPodGroup}); err != nil {
			return nil, fmt.Errorf("%s: index pods by pod group: %w", Name, err)
		}
	}
	o.pods = podInformer.GetIndexer()
	_, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, cur any) { o.podChanged(cur, false) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			o.podChanged(obj, true)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%s: watch pods: %w", Name, err)
	}
	return o, nil
}

func indexPodGroup(obj any) ([]string, error) {
	if pod, ok := obj.(*v1.Pod); ok {
		if key, _, ok := podspec.GangKey(pod); ok {
			return []string{key}, nil
		}
	}
	return nil, nil
}

// Plugin is the QueueSort plugin of one profile.
type Plugin struct{ order *Order }

var _ fwk.QueueSortPlugin = &Plugin{}

// New builds the plugin over the scheduler's shared order.
func New(_ runtime.Object, order *Order) (*Plugin, error) { return &Plugin{order: order}, nil }

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

// Less implements fwk.QueueSortPlugin.
func (p *Plugin) Less(a, b fwk.QueuedEntityInfo) bool { return p.order.Less(a, b) }

type podEntity interface{ GetPodInfo() fwk.PodInfo }

// Less: higher priority first; then earlier arrival, a gang's member
// arriving with its gang; then the gang's key, so two gangs that arrived
// together do not interleave; then the member's own arrival.
func (o *Order) Less(a, b fwk.QueuedEntityInfo) bool {
	return scoring.CompareQueueKeys(o.key(a), o.key(b)) < 0
}

// key is the entity's place in the order the simulator replays with
// (scoring.CompareQueueKeys), so live and simulated queues agree.
func (o *Order) key(e fwk.QueuedEntityInfo) scoring.QueueKey {
	gang, arrived := o.arrival(e)
	k := scoring.QueueKey{Priority: e.GetPriority(), Created: arrived.UnixNano(), Gang: gang}
	if pe, ok := e.(podEntity); ok && pe.GetPodInfo() != nil {
		k.Name = pe.GetPodInfo().GetPod().Name
	}
	return k
}

// arrival is the entity's gang key ("" for none) and when it counts as
// having arrived.
func (o *Order) arrival(e fwk.QueuedEntityInfo) (string, time.Time) {
	ts := e.GetTimestamp()
	pe, ok := e.(podEntity)
	if !ok || pe.GetPodInfo() == nil {
		return "", ts
	}
	key, _, ok := podspec.GangKey(pe.GetPodInfo().GetPod())
	if !ok {
		return "", ts
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	// The first arrival seen stays the gang's for as long as the gang is
	// remembered: an entity's sort key must not change while it is queued.
	first, seen := o.first[key]
	if !seen {
		o.first[key] = ts
		return key, ts
	}
	return key, first
}

// podChanged forgets a gang once none of its members waits to be placed.
func (o *Order) podChanged(obj any, deleted bool) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	key, _, ok := podspec.GangKey(pod)
	if !ok || o.pods == nil || !deleted && waiting(pod) {
		return
	}
	objs, _ := o.pods.ByIndex(IndexPodGroup, key)
	for _, obj := range objs {
		if waiting(obj.(*v1.Pod)) {
			return
		}
	}
	o.mu.Lock()
	delete(o.first, key)
	o.mu.Unlock()
}

// waiting: not bound, not finished, not being deleted.
func waiting(pod *v1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil &&
		pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed
}

// Len is how many gangs the order remembers.
func (o *Order) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.first)
}
