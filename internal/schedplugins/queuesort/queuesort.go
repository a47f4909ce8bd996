// Package queuesort is schedloop's QueueSort plugin: who is tried next.
// Priority first, then the profile's order policy within a priority
// (scoring.CompareOrder: arrival, shortest predicted service or fair share
// across queues, each with a starvation bound), with the members of one
// PodGroup kept together so a gang is tried back to back. Under the stock
// order a gang's members sit wherever they arrived among other pods; each
// member placed early then holds its reservation at Permit until the last
// one is reached, and at scale gangs reach their Permit timeout, are
// released and start over.
//
// A job's place comes from what the simulator orders its jobs by: its
// arrival (a gang: the first of its members the queue saw; a pod: when the
// queue first saw it, not its last requeue), its predicted service (the
// run time the profile's predictor table predicts from the job's features
// at the job's first sight, × the GPUs of the whole job) and its queue's
// attained service (GPU-seconds of its queue's bound pods, decaying with
// scoring.DefaultAttainedHalfLife, kept here from the pod informer). The
// comparison itself is scoring.CompareOrder; this package only supplies
// each entity's key.
//
// The queue is a heap that compares entities as they enter it. Keys that
// move while pods wait (a starvation bound passing, attained service
// changing) re-order only pods that re-enter the heap, which every pod does
// after each failed attempt; the simulator re-sorts before each pass. A
// profile swapped while pods wait gives new pods their keys under the new
// profile; waiting pods keep the service predicted when they were first
// seen, as the simulator predicts once at arrival.
//
// The queue needs every profile of a scheduler to use the same QueueSort
// plugin, so a configuration that adds profiles next to schedloop's enables
// this plugin in each of them (it keeps no other state of a profile).
package queuesort

import (
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Name is the plugin's name in KubeSchedulerConfiguration.
const Name = "SchedloopQueueSort"

// IndexPodGroup indexes pods by namespace/pod-group (the same index the
// gang manager adds; whichever comes first adds it).
const IndexPodGroup = "schedloop.io/pod-group"

// Order is the queue order, shared by every profile of one scheduler.
type Order struct {
	pods    cache.Indexer
	claims  podspec.ClaimSpecs
	profile *profilewatch.Holder
	// gangSize is a gang's member count (its PodGroup's minMember); false
	// when its PodGroup is not known yet.
	gangSize  func(namespace, name string) (int, bool)
	effective func(*v1.Pod) *v1.Pod
	now       func() time.Time

	mu sync.Mutex
	// first is each waiting entity's first sight: when it arrived (a gang,
	// by its key; a lone pod, by its UID) and its predicted service then.
	first map[string]sighting
	// known is each keyed pod's entity and queue, read (podspec.Read) when
	// the pod is first keyed, so that the comparisons of a waiting pod do
	// not read its labels and resources again; forgotten with the pod.
	known map[types.UID]podEntry
	// attained is each queue's attained service; counted the GPUs each
	// bound pod adds to its queue's account.
	attained map[string]*scoring.AttainedService
	counted  map[types.UID]charge
}

type sighting struct {
	at      time.Time
	service float64
	// run is the predicted run time service was computed from.
	run time.Duration
}

type podEntry struct {
	// id is the pod's entity in first: its gang's key, else its UID.
	id          string
	gang, queue string
}

type charge struct {
	queue string
	gpus  float64
}

// Options are what an Order reads besides pods.
type Options struct {
	// Profile holds the active profile and its predictor table; nil orders
	// by the default profile (arrival).
	Profile *profilewatch.Holder
	// GangSize is a gang's member count; nil (or not known) counts the
	// gang's pods the informer holds.
	GangSize func(namespace, name string) (int, bool)
	// Effective, when set, is a pod as its labels are read (its Workload
	// API gang's metadata inherited; see podspec.WithGroupMeta).
	Effective func(*v1.Pod) *v1.Pod
	// Now is the clock starvation bounds and attained service read; nil is
	// time.Now.
	Now func() time.Time
	// Claims finds the ResourceClaims pods ask for GPUs through; nil counts
	// extended resources only (podspec.RequestWith).
	Claims podspec.ClaimSpecs
}

// NewOrder builds the order over the scheduler's pod informer, which must
// not have started yet (the pod-group index is added to it). A nil informer
// gives an order that never forgets what it saw and accounts no attained
// service, for tests.
func NewOrder(podInformer cache.SharedIndexInformer, opt Options) (*Order, error) {
	o := &Order{first: map[string]sighting{}, known: map[types.UID]podEntry{}, attained: map[string]*scoring.AttainedService{},
		counted: map[types.UID]charge{}, profile: opt.Profile, gangSize: opt.GangSize, effective: opt.Effective, now: opt.Now, claims: opt.Claims}
	if o.profile == nil {
		o.profile = profilewatch.NewHolder()
	}
	if o.now == nil {
		o.now = time.Now
	}
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
		AddFunc:    func(obj any) { o.podChanged(obj, false) },
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

// groupEntity is the scheduler's own queue entry for a Workload API gang:
// with GenericWorkload on, the members of a scheduling.k8s.io PodGroup wait
// in the queue as one entity, which carries no pod of its own.
type groupEntity interface {
	GetNamespace() string
	GetName() string
	GetUnscheduledPods() []*v1.Pod
}

// podOf is the pod whose facts give e its key: the pod itself, or for a
// pod-group entity one of its members, so the group is keyed as its members
// are (the gang's key, its first sighting and its predicted service) and
// meets lone pods and scheduler-plugins gangs under the same rule; keyed by
// its queue timestamp alone it would go ahead of every job the policy ranks
// by service or attained share.
func (o *Order) podOf(e fwk.QueuedEntityInfo) *v1.Pod {
	switch x := e.(type) {
	case podEntity:
		if pi := x.GetPodInfo(); pi != nil {
			return pi.GetPod()
		}
	case groupEntity:
		if pods := x.GetUnscheduledPods(); len(pods) > 0 {
			return pods[0]
		}
		if o.pods == nil {
			return nil
		}
		// The entity lists no pods outside its scheduling cycle; the
		// informer holds its members.
		objs, _ := o.pods.ByIndex(IndexPodGroup, x.GetNamespace()+"/"+x.GetName())
		var first *v1.Pod
		for _, obj := range objs {
			if p := obj.(*v1.Pod); waiting(p) && (first == nil || p.Name < first.Name) {
				first = p
			}
		}
		return first
	}
	return nil
}

// Less: scoring.CompareOrder under the active profile at now.
func (o *Order) Less(a, b fwk.QueuedEntityInfo) bool {
	act := o.profile.Load()
	now := o.now()
	return scoring.CompareOrder(act.Params, now.UnixNano(), o.key(act, now, a), o.key(act, now, b)) < 0
}

// key is the entity's place in the order the simulator replays with, so
// live and simulated queues agree.
func (o *Order) key(act *profilewatch.Active, now time.Time, e fwk.QueuedEntityInfo) scoring.QueueKey {
	pod := o.podOf(e)
	if pod == nil {
		return scoring.QueueKey{Priority: e.GetPriority(), Created: firstQueued(e).UnixNano()}
	}
	k, _ := o.podKey(act, now, pod, e.GetPriority(), firstQueued(e))
	return k
}

// firstQueued is when e first entered the queue, the instant its first
// sighting stands for. The queue's timestamp moves each time e comes back
// after a failed attempt, and an entity is first keyed only when the queue
// compares it with another: a Workload API gang, one entity however many
// members, that arrived to an empty queue and was retried on a timer (its
// backoff after a release) would be keyed by its latest retry, behind a
// job that arrived after it.
func firstQueued(e fwk.QueuedEntityInfo) time.Time {
	ts := e.GetTimestamp()
	if first := e.GetInitialAttemptTimestamp(); first != nil && first.Before(ts) {
		return *first
	}
	return ts
}

// podKey is pod's key at now, its entity first sighted at ts if it has not
// been yet, and its job's predicted run time.
func (o *Order) podKey(act *profilewatch.Active, now time.Time, pod *v1.Pod, priority int32, ts time.Time) (scoring.QueueKey, time.Duration) {
	k := scoring.QueueKey{Priority: priority, Name: pod.Name}
	fair := act.Params.EffectiveOrder() == scoring.OrderFairShare
	o.mu.Lock()
	e, known := o.known[pod.UID]
	if s, seen := o.first[e.id]; known && seen {
		k.Gang, k.Created, k.Service = e.gang, s.at.UnixNano(), s.service
		if fair {
			k.Attained = o.attainedLocked(e.queue, now)
		}
		o.mu.Unlock()
		return k, s.run
	}
	o.mu.Unlock()
	f, _ := podspec.ReadWith(o.effectivePod(pod), o.claims)
	e = podEntry{id: string(pod.UID), gang: f.GangKey, queue: f.Queue}
	if f.GangKey != "" {
		e.id = f.GangKey
	}
	seen := o.sight(act, e.id, pod, f, ts)
	k.Gang, k.Created, k.Service = e.gang, seen.at.UnixNano(), seen.service
	o.mu.Lock()
	defer o.mu.Unlock()
	o.known[pod.UID] = e
	if fair {
		k.Attained = o.attainedLocked(e.queue, now)
	}
	return k, seen.run
}

// sight is the entity's first sighting, made now (at ts, its queue
// timestamp) if this is the first: its key must not change while it waits.
func (o *Order) sight(act *profilewatch.Active, id string, pod *v1.Pod, f podspec.Facts, ts time.Time) sighting {
	o.mu.Lock()
	s, seen := o.first[id]
	o.mu.Unlock()
	if seen {
		return s
	}
	predicted, demand := o.predict(act, pod, f)
	s = sighting{at: ts, service: scoring.PredictedService(predicted, demand), run: predicted}
	o.mu.Lock()
	defer o.mu.Unlock()
	if prev, raced := o.first[id]; raced {
		return prev
	}
	o.first[id] = s
	return s
}

// predict is the run time the profile's predictor table predicts for pod's
// job, and the job's demand in milli-GPU.
func (o *Order) predict(act *profilewatch.Active, pod *v1.Pod, f podspec.Facts) (time.Duration, int64) {
	members := 1
	job := pod.Name
	if f.Gang != "" {
		job, members = f.Gang, o.members(pod.Namespace, f.GangKey, f.Gang)
	}
	demand := int64(members) * f.Request.CountedMilli()
	return act.Predict(predict.JobFeatures(pod.Namespace+"/"+job, f.Queue, demand, f.Priority)), demand
}

// Job is a waiting pod's job as the order sees it at now: its key (from
// the job's first sighting, made now on the order's clock, the clock of
// queue timestamps, if the queue has not keyed it yet) and its predicted
// run time then.
func (o *Order) Job(pod *v1.Pod, now time.Time) (scoring.QueueKey, time.Duration) {
	return o.podKey(o.profile.Load(), now, pod, corev1helpers.PodPriority(pod), o.now())
}

// RunTime is the run time the active profile's predictor table predicts
// for pod's job, as a waiting job's is predicted at its first sighting.
func (o *Order) RunTime(pod *v1.Pod) time.Duration {
	f, _ := podspec.ReadWith(o.effectivePod(pod), o.claims)
	run, _ := o.predict(o.profile.Load(), pod, f)
	return run
}

func (o *Order) effectivePod(pod *v1.Pod) *v1.Pod {
	if o.effective == nil {
		return pod
	}
	return o.effective(pod)
}

// members is a gang's size: its PodGroup's, else the members the
// informer holds.
func (o *Order) members(namespace, key, name string) int {
	if o.gangSize != nil {
		if n, ok := o.gangSize(namespace, name); ok && n > 0 {
			return n
		}
	}
	if o.pods != nil {
		if objs, _ := o.pods.ByIndex(IndexPodGroup, key); len(objs) > 0 {
			return len(objs)
		}
	}
	return 1
}

func (o *Order) attainedAt(queue string, now time.Time) float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.attainedLocked(queue, now)
}

// attainedLocked is attainedAt with o.mu held.
func (o *Order) attainedLocked(queue string, now time.Time) float64 {
	if a := o.attained[queue]; a != nil {
		return a.Attained(now.UnixNano(), scoring.DefaultAttainedHalfLife)
	}
	return 0
}

// podChanged keeps the attained accounts (a pod charges its queue from
// when it is bound until it finishes or is deleted, as a replay charges a
// job from its start to its end) and forgets a sighting once nothing of
// its entity waits to be placed.
func (o *Order) podChanged(obj any, deleted bool) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	o.charge(pod, deleted)
	if !deleted && waiting(pod) {
		return
	}
	o.mu.Lock()
	delete(o.known, pod.UID)
	o.mu.Unlock()
	key, _, ok := podspec.GangKey(pod)
	if !ok {
		o.mu.Lock()
		delete(o.first, string(pod.UID))
		o.mu.Unlock()
		return
	}
	if o.pods == nil {
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

// charge moves pod's queue's attained service to now, adding the pod's GPUs
// when it has just been bound and taking them off when it has ended.
func (o *Order) charge(pod *v1.Pod, deleted bool) {
	running := !deleted && pod.Spec.NodeName != "" && pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed
	o.mu.Lock()
	defer o.mu.Unlock()
	c, counted := o.counted[pod.UID]
	if running == counted {
		return
	}
	now := o.now().UnixNano()
	if !running {
		delete(o.counted, pod.UID)
		o.account(c.queue).Advance(now, scoring.DefaultAttainedHalfLife, -c.gpus)
		return
	}
	q := podspec.Queue(o.effectivePod(pod))
	c = charge{queue: q, gpus: float64(podspec.RequestWith(pod, o.claims).CountedMilli()) / scoring.MilliPerGPU}
	o.counted[pod.UID] = c
	o.account(q).Advance(now, scoring.DefaultAttainedHalfLife, c.gpus)
}

func (o *Order) account(queue string) *scoring.AttainedService {
	a := o.attained[queue]
	if a == nil {
		a = &scoring.AttainedService{At: o.now().UnixNano()}
		o.attained[queue] = a
	}
	return a
}

// waiting: not bound, not finished, not being deleted.
func waiting(pod *v1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil &&
		pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed
}

// Len is how many waiting gangs and pods the order remembers.
func (o *Order) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.first)
}

// Charged is how many bound pods the attained accounts hold.
func (o *Order) Charged() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.counted)
}

// Attained is queue's attained service now, in GPU-seconds.
func (o *Order) Attained(queue string) float64 { return o.attainedAt(queue, o.now()) }
