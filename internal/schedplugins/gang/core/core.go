// Package core is the gang manager behind the gang plugin: it knows each
// gang's members (from the scheduler's pod informer, indexed by gang key:
// the scheduler-plugins label or the Workload API's
// spec.schedulingGroup, read by podspec.Gang), which of them hold
// reservations, which gangs are
// blocked or backing off, the topology plan of a gang being placed, and it
// keeps each PodGroup's status current. The plugin is a thin adapter over it.
//
// Placement rules (does a gang fit, where should it go) are not here; they
// are internal/scoring's.
package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	schedulingv1beta1listers "k8s.io/client-go/listers/scheduling/v1beta1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/scoring"
)

// IndexPodGroup indexes pods by namespace/pod-group.
const IndexPodGroup = "schedloop.io/pod-group"

// Handle is the part of the framework handle the manager uses.
type Handle interface {
	IterateOverWaitingPods(func(fwk.WaitingPod))
	Activate(logger klog.Logger, pods map[string]*v1.Pod)
	// APICacher is nil unless the scheduler makes its API calls
	// asynchronously (see Unnominate).
	APICacher() fwk.APICacher
}

// Manager tracks gangs for one scheduling profile.
type Manager struct {
	handle Handle
	pods   cache.Indexer
	groups cache.GenericLister
	// workloadGroups lists the Workload API's PodGroups; nil where the
	// scheduler does not serve that API (feature GenericWorkload off).
	workloadGroups schedulingv1beta1listers.PodGroupLister
	// workloads lists the Workload API's Workloads, whose labels and
	// annotations their gangs' pods inherit (Effective); nil as above.
	workloads schedulingv1beta1listers.WorkloadLister
	dyn       dynamic.Interface
	now       func() time.Time
	backoff   time.Duration
	status    workqueue.TypedRateLimitingInterface[string]
	// statusDelay coalesces a gang's status writes: every member event
	// within it ends in one write.
	statusDelay time.Duration
	scheduler   string

	mu      sync.Mutex
	gangs   map[string]*gang
	blocked map[string]struct{}
}

type gang struct {
	reserved map[types.UID]struct{}
	demand   scoring.GangDemand // per-member request and minMember
	plan     *scoring.GangPlan
	// unconfined: a member found no node inside a plan's domain that only
	// preference confined it to (nodes there refused it for reasons the
	// plan cannot see, such as taints), so later attempts may leave it.
	unconfined bool
	// admitted: minMember reached; the members hold what they need and no
	// longer compete for admission.
	admitted    bool
	deniedUntil time.Time
	denyReason  string
	// tried is when a Workload API gang was last tried whole and has not
	// been woken since (see Gated); zero for none. held: the last Gated
	// answer for it was to hold.
	tried time.Time
	held  bool
	// wakes counts the events that ended key's gate (Wake, wakeAll);
	// admittedAt is its value when Gated last let the gang be tried.
	wakes, admittedAt uint64
}

// Options configure a Manager.
type Options struct {
	Handle Handle
	// PodInformer is the scheduler's pod informer; New adds the pod-group
	// index, so it must not have started yet.
	PodInformer cache.SharedIndexInformer
	// NodeInformer, when set, is the scheduler's node informer: a node
	// change that may admit a pod (NodeMayAdmit) ends every Workload API
	// gang's gate, as a freed pod's does.
	NodeInformer cache.SharedInformer
	Dynamic      dynamic.Interface
	// WorkloadPodGroups lists the Workload API's PodGroups (the scheduler's
	// own informer, which it starts and syncs); nil leaves Workload API
	// gangs unknown: their members are refused as "not found".
	WorkloadPodGroups schedulingv1beta1listers.PodGroupLister
	// Workloads lists the Workload API's Workloads (the scheduler's own
	// informer too); nil leaves their metadata unread (see Effective).
	Workloads schedulingv1beta1listers.WorkloadLister
	// Backoff is how long a gang whose reservations were released is refused
	// before it may try again, so a competing gang gets its turn.
	Backoff time.Duration
	// SchedulerName, when set, is the profile's schedulerName: the manager
	// follows (and writes PodGroup status for) only pods of that profile, so
	// PodGroups another scheduler places cost it nothing.
	SchedulerName string
	// StatusDelay is how long a PodGroup's status write waits for more
	// changes to the same gang, so a gang placed back to back costs one or
	// two writes rather than several per member. Default 1 s.
	StatusDelay time.Duration
	Now         func() time.Time
}

// DefaultStatusDelay is Options.StatusDelay when unset.
const DefaultStatusDelay = time.Second

// New builds a Manager, starts the PodGroup informer and waits (up to 30 s)
// for it to sync. Everything stops with ctx.
func New(ctx context.Context, o Options) (*Manager, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.StatusDelay == 0 {
		o.StatusDelay = DefaultStatusDelay
	}
	var err error
	if _, done := o.PodInformer.GetIndexer().GetIndexers()[IndexPodGroup]; !done {
		err = o.PodInformer.AddIndexers(cache.Indexers{IndexPodGroup: indexPodGroup})
	}
	if err != nil {
		return nil, fmt.Errorf("index pods by pod group: %w", err)
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(o.Dynamic, 0)
	groupInformer := factory.ForResource(podgroup.GVR)
	m := &Manager{
		handle: o.Handle, pods: o.PodInformer.GetIndexer(), groups: groupInformer.Lister(), dyn: o.Dynamic,
		workloadGroups: o.WorkloadPodGroups, workloads: o.Workloads,
		now: o.Now, backoff: o.Backoff, statusDelay: o.StatusDelay, scheduler: o.SchedulerName,
		status: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "schedloop_podgroup_status"}),
		gangs: map[string]*gang{}, blocked: map[string]struct{}{},
	}
	_, err = o.PodInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.podChanged(nil, obj) },
		UpdateFunc: m.podChanged,
		DeleteFunc: m.podDeleted,
	})
	if err != nil {
		return nil, fmt.Errorf("watch gang pods: %w", err)
	}
	if o.NodeInformer != nil {
		if _, err := o.NodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { m.nodeChanged(nil, obj) },
			UpdateFunc: m.nodeChanged,
		}); err != nil {
			return nil, fmt.Errorf("watch nodes: %w", err)
		}
	}
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), groupInformer.Informer().HasSynced) {
		klog.FromContext(ctx).Info("PodGroup informer not synced; is the scheduling.x-k8s.io PodGroup CRD installed?")
	}
	go m.runStatus(ctx)
	go func() {
		<-ctx.Done()
		m.status.ShutDown()
		factory.Shutdown()
	}()
	return m, nil
}

func indexPodGroup(obj any) ([]string, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return nil, nil
	}
	if key, _, ok := podspec.GangKey(pod); ok {
		return []string{key}, nil
	}
	return nil, nil
}

// SetBackoff sets how long a released gang is refused.
func (m *Manager) SetBackoff(d time.Duration) {
	m.mu.Lock()
	m.backoff = d
	m.mu.Unlock()
}

// PodGroup reads a gang's PodGroup from the informer cache.
func (m *Manager) PodGroup(namespace, name string) (*podgroup.PodGroup, error) {
	obj, err := m.groups.ByNamespace(namespace).Get(name)
	if err != nil {
		return nil, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("podgroup %s/%s: unexpected %T in cache", namespace, name, obj)
	}
	return podgroup.FromUnstructured(u)
}

// Group is what the plugins read of a gang's group object, whichever API
// declared it.
type Group struct {
	API podgroup.API
	// MinMember is the scheduler-plugins minMember or the Workload API's
	// gang.minCount, at least 1.
	MinMember int
	// TimeoutSeconds is the scheduler-plugins scheduleTimeoutSeconds; nil
	// (always, for the Workload API, which has no such field) means the
	// profile's gang timeout.
	TimeoutSeconds *int32
	// TopologyKey is the Workload API's schedulingConstraints.topology key,
	// "" for none (the pods' schedloop.io/topology-required says the same
	// for either API).
	TopologyKey string
}

// ErrNotGang is Group's error for a Workload API PodGroup of the basic
// policy: its pods are scheduled one by one, as lone pods.
var ErrNotGang = errors.New("pod group has the basic scheduling policy, not a gang")

// Group reads the group object of the gang pod belongs to from the informer
// caches. A missing object is a NotFound error; a pod in no gang, or one
// declared in both APIs, is podspec.Gang's error.
func (m *Manager) Group(pod *v1.Pod) (Group, error) {
	ref, err := podspec.Gang(pod)
	if err != nil {
		return Group{}, err
	}
	switch ref.API {
	case podgroup.APIPodGroup:
		pg, err := m.PodGroup(pod.Namespace, ref.Name)
		if err != nil {
			return Group{}, err
		}
		return Group{API: ref.API, MinMember: max(int(pg.Spec.MinMember), 1), TimeoutSeconds: pg.Spec.ScheduleTimeoutSeconds}, nil
	case podgroup.APIWorkload:
		if m.workloadGroups == nil {
			return Group{}, apierrors.NewNotFound(schedulingv1beta1.Resource("podgroups"), ref.Name)
		}
		wpg, err := m.workloadGroups.PodGroups(pod.Namespace).Get(ref.Name)
		if err != nil {
			return Group{}, err
		}
		pg, ok := podgroup.FromWorkload(wpg)
		if !ok {
			return Group{}, ErrNotGang
		}
		return Group{API: ref.API, MinMember: max(int(pg.Spec.MinMember), 1), TopologyKey: podgroup.TopologyKey(wpg)}, nil
	}
	return Group{}, fmt.Errorf("pod %s/%s belongs to no gang", pod.Namespace, pod.Name)
}

// Effective is pod as schedloop's plugins read its queue, preemptibility
// and topology requirement: for a Workload API gang's member, with what
// its PodGroup and then its Workload declare and the pod does not
// (podspec.WithGroupMeta's rule); pod itself for any other pod, or while
// those objects are not (yet) known.
func (m *Manager) Effective(pod *v1.Pod) *v1.Pod {
	if m == nil || m.workloadGroups == nil || pod.Spec.SchedulingGroup == nil {
		return pod
	}
	ref, err := podspec.Gang(pod)
	if err != nil || ref.API != podgroup.APIWorkload {
		return pod
	}
	wpg, err := m.workloadGroups.PodGroups(pod.Namespace).Get(ref.Name)
	if err != nil {
		return pod
	}
	metas := []*metav1.ObjectMeta{&wpg.ObjectMeta}
	if r := wpg.Spec.WorkloadRef; r != nil && m.workloads != nil {
		if w, err := m.workloads.Workloads(pod.Namespace).Get(r.WorkloadName); err == nil {
			metas = append(metas, &w.ObjectMeta)
		}
	}
	return podspec.WithGroupMeta(pod, metas...)
}

// Size is the member count of the gang namespace/name declares, read from
// a scheduler-plugins PodGroup, else a Workload API gang's PodGroup (one
// namespace uses a name for one gang only).
func (m *Manager) Size(namespace, name string) (int, bool) {
	if pg, err := m.PodGroup(namespace, name); err == nil {
		return int(pg.Spec.MinMember), true
	}
	if m.workloadGroups == nil {
		return 0, false
	}
	wpg, err := m.workloadGroups.PodGroups(namespace).Get(name)
	if err != nil {
		return 0, false
	}
	if pg, ok := podgroup.FromWorkload(wpg); ok {
		return int(pg.Spec.MinMember), true
	}
	return 0, false
}

// Counts are a gang's members as the manager sees them.
type Counts struct {
	All     int // pods labelled into the gang, neither ended nor leaving (finished)
	Placed  int // bound, or holding a reservation in this scheduler
	Running int
}

// Count counts key's members.
func (m *Manager) Count(key string) Counts {
	objs, _ := m.pods.ByIndex(IndexPodGroup, key)
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.gangs[key]
	var c Counts
	for _, obj := range objs {
		pod := obj.(*v1.Pod)
		if finished(pod) {
			continue
		}
		c.All++
		_, reserved := g.reservedHas(pod.UID)
		if pod.Spec.NodeName != "" || reserved {
			c.Placed++
		}
		if pod.Status.Phase == v1.PodRunning {
			c.Running++
		}
	}
	return c
}

func (g *gang) reservedHas(uid types.UID) (struct{}, bool) {
	if g == nil {
		return struct{}{}, false
	}
	v, ok := g.reserved[uid]
	return v, ok
}

func (m *Manager) gang(key string) *gang {
	g := m.gangs[key]
	if g == nil {
		g = &gang{reserved: map[types.UID]struct{}{}}
		m.gangs[key] = g
	}
	return g
}

// Reserving reports whether key has members holding reservations.
func (m *Manager) Reserving(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.gangs[key]
	return g != nil && len(g.reserved) > 0
}

// OthersReserving lists what gangs other than key, already holding
// reservations, still need: the demand a new gang must leave room for.
func (m *Manager) OthersReserving(key string) []scoring.GangDemand {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []scoring.GangDemand
	for k, g := range m.gangs {
		if k == key || len(g.reserved) == 0 || g.admitted {
			continue
		}
		if left := g.demand.Members - len(g.reserved); left > 0 {
			out = append(out, scoring.GangDemand{Request: g.demand.Request, Members: left})
		}
	}
	return out
}

// Block records that key was refused because other gangs were reserving;
// it is woken when any gang releases or completes.
func (m *Manager) Block(key string) {
	m.mu.Lock()
	m.blocked[key] = struct{}{}
	m.mu.Unlock()
}

// Denied reports whether key is backing off after a release, and why.
func (m *Manager) Denied(key string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.gangs[key]
	if g == nil || !m.now().Before(g.deniedUntil) {
		return "", false
	}
	return g.denyReason, true
}

// GateLimit is how long Gated holds a Workload API gang that nothing woke:
// kube-scheduler's default podMaxInUnschedulablePodsDuration, after which
// it retries a scheduler-plugins gang's pods that no event woke either.
const GateLimit = 5 * time.Minute

// Tried records that key, a Workload API gang, is being tried whole in
// the scheduler's pod-group cycle.
//
// Why: kube-scheduler 1.37 returns a pod group whose cycle failed to its
// backoff queue, never to the unschedulable pool, so the gang is retried
// on the backoff timer (1 s doubling to 10 s) whatever happens in the
// cluster, and a node freed meanwhile goes to whichever job its event
// wakes first. A scheduler-plugins gang's pods wait in the pool until an
// event this plugin registers wakes them. Gating the group at PreEnqueue
// until such an event (Gated, Wake) puts it in the pool too, so both kinds
// of gang wake on the same events and are ordered by the same queue sort.
//
// A wake seen after Gated let the gang in but before Tried may not be in
// the snapshot the cycle runs on: the gang is then not recorded as tried,
// so it is tried again rather than held with that wake lost.
func (m *Manager) Tried(key string) {
	m.mu.Lock()
	if g := m.gang(key); g.wakes == g.admittedAt {
		g.tried = m.now()
	}
	m.mu.Unlock()
}

// Gated reports whether key must wait in the unschedulable pool: it was
// tried (Tried), nothing has woken it since (Wake), it holds no
// reservation and is not admitted, and it was tried less than GateLimit
// ago.
func (m *Manager) Gated(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.gangs[key]
	if g == nil {
		return false
	}
	g.held = !g.tried.IsZero() && !g.admitted && len(g.reserved) == 0 && m.now().Before(g.tried.Add(GateLimit))
	if !g.held {
		g.admittedAt = g.wakes
	}
	return g.held
}

// Activate moves pods to the active queue, as the framework handle's
// Activate does, ending first the gate of each gang among them (Wake): a
// Workload API gang held at PreEnqueue (Gated) would otherwise meet the
// gate again on its way in and go back to the pool, where a
// scheduler-plugins gang's pods are tried. The reservation book activates
// the pods it turned away through it when its reservation moves or ends.
func (m *Manager) Activate(logger klog.Logger, pods map[string]*v1.Pod) {
	for _, p := range pods {
		if key, _, ok := podspec.GangKey(p); ok {
			m.Wake(key)
		}
	}
	m.handle.Activate(logger, pods)
}

// Wake ends key's gate: an event that may let it start has been seen.
func (m *Manager) Wake(key string) {
	m.mu.Lock()
	if g := m.gangs[key]; g != nil {
		g.tried = time.Time{}
		g.wakes++
	}
	m.mu.Unlock()
}

// WakeCheck is how long after capacity is freed a gang still held in the
// unschedulable pool is activated.
//
// Why: the scheduler asks the plugin's hint, which ends the hold, only when
// no other plugin's hint queued the pod first; a member that another
// plugin (NodeResourcesFit, say) also refused may be queued by that
// plugin's hint, meet the hold at PreEnqueue and go back to the pool, and
// nothing else may happen in the cluster to try it again. The pod informer
// ends the hold too, but may do so after that PreEnqueue. Activating at
// once instead would race the scheduler's own handling of the event and
// could start the gang ahead of a job the queue order puts first.
const WakeCheck = time.Second

// wakeAll ends every gate: capacity was freed. Gangs still held WakeCheck
// later are activated.
func (m *Manager) wakeAll() {
	m.mu.Lock()
	var held []string
	for k, g := range m.gangs {
		g.tried = time.Time{}
		g.wakes++
		if g.held {
			held = append(held, k)
		}
	}
	m.mu.Unlock()
	if len(held) == 0 {
		return
	}
	time.AfterFunc(WakeCheck, func() {
		for _, k := range held {
			m.mu.Lock()
			g := m.gangs[k]
			still := g != nil && g.held
			m.mu.Unlock()
			if still {
				m.activate(k)
			}
		}
	})
}

// Plan is the topology plan of key's current placement attempt, if any.
func (m *Manager) Plan(key string) (*scoring.GangPlan, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.gangs[key]
	if g == nil || g.plan == nil {
		return nil, false
	}
	return g.plan, true
}

// SetPlan records the topology plan for key's current attempt.
func (m *Manager) SetPlan(key string, p *scoring.GangPlan) {
	m.mu.Lock()
	m.gang(key).plan = p
	m.mu.Unlock()
}

// Unconfine lets key's members leave their planned domain from now on,
// until the manager forgets the gang.
func (m *Manager) Unconfine(key string) {
	m.mu.Lock()
	m.gang(key).unconfined = true
	m.mu.Unlock()
}

// Unconfined reports whether Unconfine was called for key.
func (m *Manager) Unconfined(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.gangs[key]
	return g != nil && g.unconfined
}

// Reserve records that pod holds a reservation; demand is its gang's
// per-member request and minMember. On the gang's first reservation the
// rest of its members are moved to the active queue.
func (m *Manager) Reserve(pod *v1.Pod, key string, demand scoring.GangDemand) {
	m.mu.Lock()
	g := m.gang(key)
	first := len(g.reserved) == 0
	g.reserved[pod.UID] = struct{}{}
	g.demand = demand
	m.mu.Unlock()
	if first {
		m.activate(key)
	}
	m.queueStatus(key)
}

// Try records that pod holds a reservation within the scheduler's
// pod-group cycle, where the whole group is tried at once and every
// reservation is a trial the scheduler takes back (Unreserve) before it
// acts on the outcome: it reserves again for binding when the group fits,
// and runs PodGroupPostFilter when it does not. The other members are in
// the same cycle, so none is activated, and the gang's gate (Gated) stays
// as Tried set it.
func (m *Manager) Try(pod *v1.Pod, key string, demand scoring.GangDemand) {
	m.mu.Lock()
	g := m.gang(key)
	g.reserved[pod.UID] = struct{}{}
	g.demand = demand
	m.mu.Unlock()
}

// Retry ends key's gate and moves its waiting members to the active queue
// at once: its next attempt differs from the one that failed (a domain
// that refused it no longer confines it), so no cluster event needs to
// come first. Members still in flight are queued when they come back.
func (m *Manager) Retry(key string) { m.activate(key) }

// Unreserve drops pod's reservation.
func (m *Manager) Unreserve(pod *v1.Pod, key string) {
	m.mu.Lock()
	if g := m.gangs[key]; g != nil {
		delete(g.reserved, pod.UID)
	}
	m.mu.Unlock()
	m.queueStatus(key)
}

// Unnominate clears pod's nominated node in the API. With
// NominatedNodeNameForExpectation on, kube-scheduler writes the node of a
// member held at Permit as its nominated node (the hint autoscalers read),
// and on a release it clears it only if its informer has already seen that
// write: a member rejected just after it was placed keeps the node. The
// scheduler then counts the member, back in its queue, on that node for
// every other pod (as a preemptor's claim) and tries it there first, off
// the plan its gang is placed by. Gang members never preempt, so a member
// that is not held has no nomination worth keeping. Called where the
// member's reservation is returned (node is where it was placed), after
// the scheduler asked for its write, so the cleared value must be the
// last.
//
// That takes care where the scheduler makes its API calls asynchronously
// (feature SchedulerAsyncAPICalls; the handle then has an APICacher). Its
// binding cycle only queues the nomination in the API dispatcher and goes
// on to wait at Permit, so when the member is turned away the nomination
// may still be queued or in flight, and a clear written straight to the
// API server could land before it. The dispatcher keeps at most one call
// per pod and runs calls for one pod one after the other: a new call of
// the same type is merged into a queued one (the newer nominating info
// wins) and waits for one in flight to finish. So the clear is first
// queued there as a status patch of its own and waited for: a queued
// nomination is replaced by it and never sent, an in-flight one finishes
// first. The patch is built from a status naming node as nominated, so
// the dispatcher does not skip it as a no-op when the pod object at hand
// (read before the nomination was written) names none. The same merge
// means the clear cannot be left in the dispatcher for later: the
// scheduler's failure handling queues the pod's PodScheduled condition
// next, built from its informer's copy of the pod, and merged into a
// queued clear that patch clears nothing while the copy does not yet show
// the nomination (it writes only what differs from the copy). Once it is done, the clear is written
// straight to the API server as well, unconditionally, after every call
// the dispatcher had for the pod: the dispatcher's patch is computed
// against the status it was given and the informer's copies it syncs
// from, which can lag the nomination.
func (m *Manager) Unnominate(ctx context.Context, pod *v1.Pod, node string) error {
	if m.dyn == nil {
		return nil
	}
	var queued error
	if c := m.handle.APICacher(); c != nil {
		nominated := &v1.Pod{ObjectMeta: pod.ObjectMeta, Status: *pod.Status.DeepCopy()}
		nominated.Status.NominatedNodeName = node
		onFinish, err := c.PatchPodStatus(nominated, nil, &fwk.NominatingInfo{NominatingMode: fwk.ModeOverride})
		if err == nil {
			err = c.WaitOnFinish(ctx, onFinish)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			queued = fmt.Errorf("clear the nominated node through the scheduler's API dispatcher: %w", err)
		}
	}
	_, err := m.dyn.Resource(podsGVR).Namespace(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType,
		[]byte(`{"status":{"nominatedNodeName":null}}`), metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		err = nil
	}
	return errors.Join(queued, err)
}

var podsGVR = v1.SchemeGroupVersion.WithResource("pods")

// activate moves key's members that are still waiting for a scheduling
// attempt to the active queue, so a gang is placed back to back.
func (m *Manager) activate(key string) {
	m.Wake(key)
	objs, _ := m.pods.ByIndex(IndexPodGroup, key)
	pods := map[string]*v1.Pod{}
	for _, obj := range objs {
		if pod := obj.(*v1.Pod); pod.Spec.NodeName == "" {
			pods[pod.Namespace+"/"+pod.Name] = pod
		}
	}
	if len(pods) > 0 {
		m.handle.Activate(klog.Background(), pods)
	}
}

// AllowWaiting lets every member of key waiting at Permit proceed to bind.
func (m *Manager) AllowWaiting(key, plugin string) {
	m.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if k, _, ok := podspec.GangKey(wp.GetPod()); ok && k == key {
			wp.Allow(plugin)
		}
	})
	m.complete(key)
}

// complete ends key's placement attempt and wakes blocked gangs.
func (m *Manager) complete(key string) {
	m.mu.Lock()
	if g := m.gangs[key]; g != nil {
		g.plan, g.admitted = nil, true
	}
	m.mu.Unlock()
	m.wakeBlocked()
}

// Release rejects every member of key waiting at Permit, so the whole
// gang's reservations are returned, and refuses the gang for the backoff.
// It is safe to call again while the rejected members unreserve.
func (m *Manager) Release(key, plugin, reason string) {
	m.mu.Lock()
	g := m.gang(key)
	g.plan, g.admitted = nil, false
	if m.now().Before(g.deniedUntil) && len(g.reserved) == 0 {
		m.mu.Unlock()
		return
	}
	backoff := m.backoff
	g.deniedUntil, g.denyReason = time.Unix(0, scoring.GangRetryAt(m.now().UnixNano(), backoff)), reason
	m.mu.Unlock()
	m.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if k, _, ok := podspec.GangKey(wp.GetPod()); ok && k == key {
			wp.Reject(plugin, reason)
		}
	})
	m.wakeBlocked()
	m.queueStatus(key)
	// Nothing else may happen in the cluster to requeue the gang once its
	// backoff ends, so wake it then.
	time.AfterFunc(backoff, func() {
		m.activate(key)
		m.forget(key)
	})
}

// queueStatus schedules a write of key's PodGroup status. The delaying
// queue keeps one entry per key, due at the earliest time asked for, so
// the changes of one gang within statusDelay are written together.
func (m *Manager) queueStatus(key string) {
	m.status.AddAfter(key, m.statusDelay)
}

// forget drops what the manager remembers about key once none of it
// matters: no member holds a reservation or waits to be placed, no plan,
// no backoff running. Finished and deleted gangs so leave nothing behind;
// a gang that gets new members starts afresh.
func (m *Manager) forget(key string) {
	objs, _ := m.pods.ByIndex(IndexPodGroup, key)
	for _, obj := range objs {
		if pod := obj.(*v1.Pod); pod.Spec.NodeName == "" && !finished(pod) {
			return
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.gangs[key]; g != nil {
		if len(g.reserved) > 0 || g.plan != nil || m.now().Before(g.deniedUntil) {
			return
		}
		delete(m.gangs, key)
	}
	delete(m.blocked, key)
}

// Tracked is how many gangs the manager holds state for.
func (m *Manager) Tracked() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.gangs)
}

// finished reports whether pod is no longer a member its gang counts: it
// ended, or it is leaving (podspec.Leaving). An evicted member is marked
// (DisruptionTarget) before it is deleted and its grace period runs after:
// counted until it is gone, it would make up the quorum of members placed
// in its stead, and such a member would be let through Permit beside a pod
// that is being evicted.
func finished(pod *v1.Pod) bool {
	return podspec.Leaving(pod) || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

func (m *Manager) wakeBlocked() {
	m.mu.Lock()
	keys := make([]string, 0, len(m.blocked))
	for k := range m.blocked {
		keys = append(keys, k)
	}
	clear(m.blocked)
	m.mu.Unlock()
	for _, k := range keys {
		m.activate(k)
	}
}

// ours reports whether pod is scheduled by this manager's profile.
func (m *Manager) ours(pod *v1.Pod) bool {
	return m.scheduler == "" || pod.Spec.SchedulerName == m.scheduler
}

func (m *Manager) podChanged(old, obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	if was, ok := old.(*v1.Pod); ok && pod.Spec.NodeName != "" && finished(pod) && !finished(was) {
		m.wakeAll()
	}
	if !m.ours(pod) {
		return
	}
	key, _, ok := podspec.GangKey(pod)
	if !ok {
		return
	}
	if pod.Spec.NodeName != "" {
		// Bound: the informer counts it from now on.
		m.mu.Lock()
		if g := m.gangs[key]; g != nil {
			delete(g.reserved, pod.UID)
		}
		m.mu.Unlock()
	}
	if pod.Spec.NodeName != "" || finished(pod) {
		m.forget(key)
	}
	m.queueStatus(key)
}

func (m *Manager) podDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	if pod.Spec.NodeName != "" {
		m.wakeAll()
	}
	if !m.ours(pod) {
		return
	}
	if key, _, ok := podspec.GangKey(pod); ok {
		m.mu.Lock()
		if g := m.gangs[key]; g != nil {
			delete(g.reserved, pod.UID)
		}
		m.mu.Unlock()
		m.forget(key)
		m.queueStatus(key)
		if pod.Spec.NodeName != "" {
			m.wakeBlocked()
		}
	}
}

// Phase derives a PodGroup phase from its counts, as scheduler-plugins'
// PodGroup controller does.
func Phase(c Counts, minMember int) string {
	switch {
	case c.Placed >= minMember && c.Running >= minMember:
		return podgroup.PhaseRunning
	case c.Placed >= minMember:
		return podgroup.PhaseScheduled
	case c.Placed > 0:
		return podgroup.PhaseScheduling
	case c.All >= minMember:
		return podgroup.PhasePreScheduling
	default:
		return podgroup.PhasePending
	}
}

func (m *Manager) runStatus(ctx context.Context) {
	for {
		key, quit := m.status.Get()
		if quit {
			return
		}
		if err := m.syncStatus(ctx, key); err != nil {
			klog.FromContext(ctx).V(4).Info("PodGroup status update failed; retrying", "podGroup", key, "err", err)
			m.status.AddRateLimited(key)
		} else {
			m.status.Forget(key)
		}
		m.status.Done(key)
	}
}

func (m *Manager) syncStatus(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pg, err := m.PodGroup(ns, name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	c := m.Count(key)
	next := pg.Status
	next.Phase = Phase(c, int(pg.Spec.MinMember))
	next.Scheduled = int32(c.Placed)
	next.Running = int32(c.Running)
	if next.ScheduleStartTime == nil && c.Placed > 0 {
		t := metav1.NewTime(m.now())
		next.ScheduleStartTime = &t
	}
	if equality.Semantic.DeepEqual(next, pg.Status) {
		return nil
	}
	pg = pg.DeepCopy()
	pg.Status = next
	_, err = podgroup.UpdateStatus(ctx, m.dyn, pg)
	return err
}
