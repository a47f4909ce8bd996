package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/dra"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
)

// Store is what the watcher writes; *store.Store is one. Every method merges
// repeated observations, so a re-list after a restart or a dropped watch adds
// nothing twice.
type Store interface {
	UpsertNodes(ctx context.Context, nodes []schedloop.Node) error
	UpsertJobs(ctx context.Context, jobs []schedloop.Job) error
	UpsertPods(ctx context.Context, pods []schedloop.Pod) error
	DeriveJobs(ctx context.Context, jobUIDs []string) error
	InsertAttempts(ctx context.Context, attempts []schedloop.SchedulingAttempt) (int64, error)
	UpsertEvents(ctx context.Context, events []schedloop.Event) error
	UpsertPreemptions(ctx context.Context, preemptions []schedloop.Preemption) error
}

// WatchOptions configure a Watcher. Client and Store are required.
type WatchOptions struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface // nil: no PodGroups
	Store   Store
	Parser  *Parser // default NewParser()
	// FlushInterval is how often changes are written. Default 1s.
	FlushInterval time.Duration
	// Now and MapTime are injected for tests and accelerated replays; they
	// default to time.Now and the identity.
	Now     func() time.Time
	MapTime func(time.Time) time.Time
	Logger  *slog.Logger
	// PodsChanged, when set, is called after a flush stored a pod's
	// creation, binding, start, end or deletion (not a mere update of
	// one): what a wait estimate starts from changed. It must not block.
	PodsChanged func()
}

// Watcher follows Pods, Events, Nodes, PodGroups and DRA ResourceSlices and
// ResourceClaims with shared informers and writes pods, jobs, attempts,
// events, nodes and the slices' GPUs to the store in batches.
type Watcher struct {
	opts  WatchOptions
	clock clock
	log   *slog.Logger

	processed   *prometheus.CounterVec
	writeErrors prometheus.Counter
	synced      prometheus.Gauge
	isSynced    atomic.Bool

	mu     sync.Mutex
	seen   map[string]*podSeen          // pod UID -> observed transitions
	pods   map[string]*corev1.Pod       // dirty pods by UID
	events map[string]*corev1.Event     // dirty events by UID
	evSeen map[string]time.Time         // event UID -> when its latest count was observed
	nodes  map[string]*corev1.Node      // dirty nodes by name
	groups map[string]group             // every known gang by "namespace/name"
	dirtyG map[string]group             // gangs to (re)write by UID
	byGang map[string]map[string]string // "namespace/name" -> pod UID -> pod UID, for pods waiting on their gang
	podsBy map[string]*corev1.Pod       // last state of every live pod, for regrouping
	// lifecycle: a dirty pod was created, bound, started, ended or deleted
	// since the last flush (WatchOptions.PodsChanged).
	lifecycle bool
	// workloads holds each Workload API Workload's labels and annotations
	// by "namespace/name", which its gangs' pods inherit.
	workloads map[string]metav1.ObjectMeta
	// attempts parsed from events and not yet stored, by attempt key. A
	// message is parsed (and counted, if not understood) once, however often
	// its write is retried.
	attempts map[string]schedloop.SchedulingAttempt
	// condPending are failures read from pods' PodScheduled conditions not
	// yet known to be an Event's, by pod UID; failNotes the FailedScheduling
	// notes of each pod's Events, by pod UID and event UID (condition.go).
	condPending map[string][]condFailure
	failNotes   map[string]map[string]failureNote
	kueue       map[string]schedloop.KueueWorkload // dirty Kueue Workloads by UID
	// kueueQueues are ClusterQueues seen and not yet stored, by name;
	// kueueQueuesGone those deleted.
	kueueQueues     map[string]schedloop.KueueClusterQueue
	kueueQueuesGone map[string]bool
	dra             draState
	// knownNodes are the nodes listed, whose GPUs may be stored.
	knownNodes map[string]bool
}

// NewWatcher validates opts.
func NewWatcher(opts WatchOptions) (*Watcher, error) {
	if opts.Client == nil || opts.Store == nil {
		return nil, errors.New("events watcher: Client and Store are required")
	}
	if opts.Parser == nil {
		opts.Parser = NewParser()
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MapTime == nil {
		opts.MapTime = func(t time.Time) time.Time { return t }
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{opts: opts, clock: clock{now: opts.Now, mapTime: opts.MapTime}, log: opts.Logger,
		seen: map[string]*podSeen{}, pods: map[string]*corev1.Pod{}, events: map[string]*corev1.Event{},
		evSeen: map[string]time.Time{}, nodes: map[string]*corev1.Node{}, groups: map[string]group{},
		dirtyG: map[string]group{}, byGang: map[string]map[string]string{}, podsBy: map[string]*corev1.Pod{},
		workloads:   map[string]metav1.ObjectMeta{},
		condPending: map[string][]condFailure{}, failNotes: map[string]map[string]failureNote{},
		attempts: map[string]schedloop.SchedulingAttempt{}, kueue: map[string]schedloop.KueueWorkload{},
		kueueQueues: map[string]schedloop.KueueClusterQueue{}, kueueQueuesGone: map[string]bool{},
		dra: newDRAState(), knownNodes: map[string]bool{}}
	w.processed = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "schedloop", Subsystem: "events",
		Name: "objects_processed_total", Help: "Informer notifications handled, by kind (Pod, Event, Node, PodGroup, Workload, KueueWorkload, KueueClusterQueue, ResourceSlice, ResourceClaim)."}, []string{"kind"})
	w.writeErrors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "schedloop", Subsystem: "events",
		Name: "write_errors_total", Help: "Failed writes of cluster history to Postgres; the changes are kept and retried."})
	w.synced = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "schedloop", Subsystem: "events",
		Name: "informers_synced", Help: "1 once every informer has listed its objects."})
	return w, nil
}

// Collectors returns the watcher's metrics, the parser's included.
func (w *Watcher) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{w.processed, w.writeErrors, w.synced}, w.opts.Parser.Collectors()...)
}

// Synced reports whether Run's informers have listed every object and the
// watcher is following changes; readiness checks use it.
func (w *Watcher) Synced() bool { return w.isSynced.Load() }

// gangGVRs lists the PodGroup resources the server serves: scheduler-plugins'
// and, where the server has the Workload API, Kubernetes' own, with that
// API's Workloads (whose metadata the gangs' pods inherit).
func (w *Watcher) gangGVRs() []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	disc := w.opts.Client.Discovery()
	if res, err := disc.ServerResourcesForGroupVersion(podgroup.GVR.GroupVersion().String()); err == nil {
		for _, r := range res.APIResources {
			if r.Name == podgroup.GVR.Resource {
				out = append(out, podgroup.GVR)
			}
		}
	}
	if groups, err := disc.ServerGroups(); err == nil {
		for _, g := range groups.Groups {
			if g.Name != "scheduling.k8s.io" {
				continue
			}
			for _, v := range g.Versions {
				res, err := disc.ServerResourcesForGroupVersion(v.GroupVersion)
				if err != nil {
					continue
				}
				var found []schema.GroupVersionResource
				for _, r := range res.APIResources {
					if r.Name == "podgroups" || r.Name == resourceWorkloads {
						found = append(found, schema.GroupVersionResource{Group: g.Name, Version: v.Version, Resource: r.Name})
					}
				}
				slices.SortFunc(found, func(a, b schema.GroupVersionResource) int { return strings.Compare(a.Resource, b.Resource) })
				out = append(out, found...)
				if len(out) > 0 && out[len(out)-1].Group == g.Name {
					break // one version is enough
				}
			}
		}
	}
	return out
}

// Run starts the informers, waits for them to list, and writes changes every
// FlushInterval until ctx ends; it returns after a last flush attempt.
func (w *Watcher) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(w.opts.Client, 0)
	handlers := []struct {
		inf  cache.SharedIndexInformer
		kind string
	}{
		{factory.Core().V1().Pods().Informer(), "Pod"},
		{factory.Core().V1().Events().Informer(), "Event"},
		{factory.Core().V1().Nodes().Informer(), "Node"},
	}
	if w.draServed() {
		handlers = append(handlers, struct {
			inf  cache.SharedIndexInformer
			kind string
		}{factory.Resource().V1().ResourceSlices().Informer(), "ResourceSlice"}, struct {
			inf  cache.SharedIndexInformer
			kind string
		}{factory.Resource().V1().ResourceClaims().Informer(), "ResourceClaim"})
		w.log.Info("watching DRA ResourceSlices and ResourceClaims")
	}
	var dynFactory dynamicinformer.DynamicSharedInformerFactory
	if w.opts.Dynamic != nil {
		if gvrs := w.gangGVRs(); len(gvrs) > 0 {
			dynFactory = dynamicinformer.NewDynamicSharedInformerFactory(w.opts.Dynamic, 0)
			for _, gvr := range gvrs {
				kind := "PodGroup"
				if gvr.Resource == resourceWorkloads {
					kind = kindWorkload
				}
				handlers = append(handlers, struct {
					inf  cache.SharedIndexInformer
					kind string
				}{dynFactory.ForResource(gvr).Informer(), kind})
				w.log.Info("watching gangs", "resource", gvr.String())
			}
		}
		if w.kueueServed() {
			if dynFactory == nil {
				dynFactory = dynamicinformer.NewDynamicSharedInformerFactory(w.opts.Dynamic, 0)
			}
			handlers = append(handlers, struct {
				inf  cache.SharedIndexInformer
				kind string
			}{dynFactory.ForResource(KueueWorkloadGVR).Informer(), kindKueueWorkload}, struct {
				inf  cache.SharedIndexInformer
				kind string
			}{dynFactory.ForResource(KueueClusterQueueGVR).Informer(), kindKueueClusterQueue})
			w.log.Info("watching Kueue workloads and cluster queues", "resources", []string{KueueWorkloadGVR.String(), KueueClusterQueueGVR.String()})
		}
	}
	var syncs []cache.InformerSynced
	for _, h := range handlers {
		kind := h.kind
		if err := h.inf.SetTransform(trimForWatch); err != nil {
			return fmt.Errorf("watch %s: %w", kind, err)
		}
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.handle(kind, obj, false) },
			UpdateFunc: func(_, obj any) { w.handle(kind, obj, false) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				w.handle(kind, obj, true)
			},
		}); err != nil {
			return fmt.Errorf("watch %s: %w", kind, err)
		}
		syncs = append(syncs, h.inf.HasSynced)
	}
	infCtx, stop := context.WithCancel(ctx)
	defer stop()
	factory.Start(infCtx.Done())
	if dynFactory != nil {
		dynFactory.Start(infCtx.Done())
	}
	defer func() {
		stop()
		factory.Shutdown()
		if dynFactory != nil {
			dynFactory.Shutdown()
		}
	}()
	if !cache.WaitForCacheSync(ctx.Done(), syncs...) {
		return fmt.Errorf("events watcher: informers did not list before shutdown: %w", ctx.Err())
	}
	w.synced.Set(1)
	w.isSynced.Store(true)
	defer w.isSynced.Store(false)
	backoff := wait.Backoff{Duration: w.opts.FlushInterval, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 30 * time.Second}
	delay := w.opts.FlushInterval
	for {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			final, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return w.Flush(final)
		case <-t.C:
		}
		if err := w.Flush(ctx); err != nil {
			if ctx.Err() != nil {
				continue
			}
			w.writeErrors.Inc()
			delay = backoff.Step()
			w.log.Warn("cluster history not stored, retrying", "retry_in", delay.Round(time.Millisecond), "err", err)
			continue
		}
		backoff = wait.Backoff{Duration: w.opts.FlushInterval, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 30 * time.Second}
		delay = w.opts.FlushInterval
	}
}

// handle records an informer notification as a pending change.
func (w *Watcher) handle(kind string, obj any, deleted bool) {
	// Counted once recorded, after the unlock: a Flush that follows a
	// count it has seen writes the change that count stands for.
	defer w.processed.WithLabelValues(kind).Inc()
	now := w.opts.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if u, ok := obj.(*unstructured.Unstructured); ok && kind == kindKueueWorkload {
		w.handleKueue(u, deleted)
		return
	}
	if u, ok := obj.(*unstructured.Unstructured); ok && kind == kindKueueClusterQueue {
		w.handleKueueQueue(u, deleted, now)
		return
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		uid := string(o.UID)
		s := w.seen[uid]
		if s == nil {
			s = &podSeen{}
			w.seen[uid] = s
		}
		before := *s
		s.observe(o, now)
		w.observeCondition(o, s, before.created.IsZero(), now)
		if before.created.IsZero() || before.bound != s.bound || before.started != s.started || before.ended != s.ended || deleted {
			w.lifecycle = true
		}
		if deleted {
			s.deleted = true
			if s.ended.IsZero() {
				s.ended = now
			}
			delete(w.podsBy, uid)
		} else {
			w.podsBy[uid] = o
		}
		w.pods[uid] = o
	case *corev1.Event:
		if deleted {
			return // the apiserver expiring an event is no news
		}
		uid := string(o.UID)
		if prev, ok := w.events[uid]; !ok || prev.ResourceVersion != o.ResourceVersion {
			w.evSeen[uid] = now
		}
		w.events[uid] = o
	case *corev1.Node:
		if !deleted {
			w.nodes[o.Name] = o
			if !w.knownNodes[o.Name] {
				w.knownNodes[o.Name] = true
				w.dra.inventoryDirty = true
			}
		}
	case *resourcev1.ResourceSlice:
		w.sliceChanged(o, deleted)
	case *resourcev1.ResourceClaim:
		w.claimChanged(o, deleted)
	case *unstructured.Unstructured:
		if kind == kindWorkload {
			w.workloadChanged(o, deleted)
			return
		}
		g := w.clock.groupFromUnstructured(o, now)
		key := g.namespace + "/" + g.name
		if deleted {
			// The job ends now if its members were all evicted: nothing can
			// join it any more (store.DeriveJobs).
			if old, ok := w.groups[key]; ok && old.uid == g.uid {
				g = old
			}
			g.deleted = w.clock.at(now)
			w.dirtyG[g.uid] = g
			delete(w.groups, key)
			return
		}
		if old, ok := w.groups[key]; ok && old.uid == g.uid && !old.created.IsZero() {
			g.created = old.created // keep the finer first observation
		}
		w.groups[key] = g
		w.dirtyG[g.uid] = g
		for uid := range w.byGang[key] {
			if p := w.podsBy[uid]; p != nil {
				w.pods[uid] = p
			}
		}
		delete(w.byGang, key)
	}
}

// Names of the Workload API's Workload resource and informer kind.
const (
	resourceWorkloads = "workloads"
	kindWorkload      = "Workload"
)

// workloadChanged records a Workload's metadata and rewrites the gangs made
// from it, and their pods, which inherit it. Called with w.mu held.
func (w *Watcher) workloadChanged(u *unstructured.Unstructured, deleted bool) {
	key := u.GetNamespace() + "/" + u.GetName()
	if deleted {
		delete(w.workloads, key)
	} else {
		w.workloads[key] = metav1.ObjectMeta{Labels: u.GetLabels(), Annotations: u.GetAnnotations()}
	}
	gangs := map[string]bool{}
	for gk, g := range w.groups {
		if g.workloadAPI && g.namespace == u.GetNamespace() && g.workload == u.GetName() {
			gangs[gk] = true
			w.dirtyG[g.uid] = g
		}
	}
	if len(gangs) == 0 {
		return
	}
	for uid, p := range w.podsBy {
		if gangs[gangOf(p)] {
			w.pods[uid] = p
		}
	}
}

// resolved is g with its Workload's metadata applied (group.withWorkload).
// Called with w.mu held.
func (w *Watcher) resolved(g group) group {
	if !g.workloadAPI {
		return g
	}
	m, ok := w.workloads[g.namespace+"/"+g.workload]
	if !ok {
		return g.withWorkload(nil)
	}
	return g.withWorkload(&m)
}

// effective is pod as the scheduler reads it, a Workload API gang's member
// inheriting what its PodGroup and Workload declare
// (podspec.WithGroupMeta). Called with w.mu held.
func (w *Watcher) effective(pod *corev1.Pod, g group) *corev1.Pod {
	if !g.workloadAPI {
		return pod
	}
	metas := []*metav1.ObjectMeta{&g.meta}
	if m, ok := w.workloads[g.namespace+"/"+g.workload]; ok {
		metas = append(metas, &m)
	}
	return podspec.WithGroupMeta(pod, metas...)
}

// gangOf names the gang a pod declares, "" for a lone pod, as the scheduler
// reads it (podspec.Gang): either API's group, and none for a pod declaring
// one both ways, which the scheduler refuses and so places as no gang.
func gangOf(pod *corev1.Pod) string {
	key, _, _ := podspec.GangKey(pod)
	return key
}

// Flush writes the pending changes. On error they stay pending (merged with
// anything newer) for the next call.
func (w *Watcher) Flush(ctx context.Context) error {
	now := w.opts.Now()
	w.mu.Lock()
	pods, events, nodes, groups, lifecycle := w.pods, w.events, w.nodes, w.dirtyG, w.lifecycle
	w.pods, w.events, w.nodes, w.dirtyG, w.lifecycle = map[string]*corev1.Pod{}, map[string]*corev1.Event{}, map[string]*corev1.Node{}, map[string]group{}, false
	var podRows []schedloop.Pod
	jobs := map[string]schedloop.Job{}
	var inv *dra.Inventory
	if len(w.dra.slices) > 0 {
		inv = w.inventory()
	}
	dirtyClaims := w.dra.dirty
	w.dra.dirty = map[string]dirtyClaim{}
	var claimRows []schedloop.ResourceClaim
	if len(dirtyClaims) > 0 {
		claimInv := inv
		if claimInv == nil {
			claimInv = dra.NewInventory(nil)
		}
		for _, d := range dirtyClaims {
			claimRows = append(claimRows, w.claimRow(d.claim, d.deleted, now, claimInv))
		}
	}
	derive := map[string]bool{}
	for _, g := range groups {
		jobs[g.uid] = w.resolved(g).job(0, 0)
		derive[g.uid] = true
	}
	for uid, pod := range pods {
		seen := w.seen[uid]
		jobUID, jobName := podspec.LoneJob(pod)
		key := gangOf(pod)
		if key != "" {
			g, ok := w.groups[key]
			if !ok {
				// The gang is not known yet: store the pod, and again once it is.
				jobUID = ""
				if w.byGang[key] == nil {
					w.byGang[key] = map[string]string{}
				}
				w.byGang[key][uid] = uid
			} else {
				jobUID = g.uid
				pod = w.effective(pod, g)
				p := w.clock.toPod(pod, seen, jobUID)
				j := w.resolved(g).job(p.GPUs, p.Priority)
				j.GPUMilliPerMember = p.GPUMilli
				jobs[g.uid] = j
			}
		}
		p := w.clock.toPod(pod, seen, jobUID)
		if inv != nil {
			p.GPUUUIDs = w.gpuUUIDs(pod, inv)
		}
		if key == "" {
			j := loneJob(p, jobUID, jobName)
			if prev, ok := jobs[jobUID]; ok && prev.Created.Before(j.Created) {
				j.Created = prev.Created // a pod made in place of an evicted one
			}
			jobs[jobUID] = j
		}
		if jobUID != "" {
			derive[jobUID] = true
		}
		podRows = append(podRows, p)
	}
	var eventRows []schedloop.Event
	var preemptions []schedloop.Preemption
	for uid, e := range events {
		row := w.clock.toEvent(e, w.evSeen[uid])
		eventRows = append(eventRows, row)
		if p, ok := preemption(row); ok {
			preemptions = append(preemptions, p)
		}
		w.noteFailure(row, e, w.evSeen[uid])
		if _, parsed := w.attempts[attemptKey(row)]; parsed {
			continue
		}
		for i, a := range attempts(row, w.opts.Parser) {
			if i == 0 && a.Result != schedloop.AttemptScheduled && a.Category == schedloop.WaitOther {
				w.log.Info("scheduling message not understood; stored under category other", "pod", row.InvolvedName, "message", row.Message)
			}
			w.attempts[a.Key] = a
		}
	}
	w.resolveConditions(now)
	attempts := make([]schedloop.SchedulingAttempt, 0, len(w.attempts))
	for _, a := range w.attempts {
		attempts = append(attempts, a)
	}
	var nodeRows []schedloop.Node
	for _, n := range nodes {
		nodeRows = append(nodeRows, w.clock.toNode(n, now))
	}
	var gpuRows []schedloop.GPU
	var deviceRows []schedloop.DRADevice
	gpusDirty := w.dra.inventoryDirty && inv != nil
	if gpusDirty {
		gpuRows = draGPUs(inv, w.knownNodes)
		deviceRows = draDevices(inv)
		w.dra.inventoryDirty = false
	}
	w.mu.Unlock()

	err := w.write(ctx, podRows, jobs, derive, eventRows, attempts, nodeRows)
	if gs, ok := w.opts.Store.(GPUStore); ok && err == nil && len(gpuRows) > 0 {
		err = gs.UpsertGPUs(ctx, gpuRows)
	}
	if ds, ok := w.opts.Store.(DRAStore); ok && err == nil {
		if gpusDirty {
			err = ds.ReplaceDRADevices(ctx, deviceRows, w.clock.at(now))
		}
		if err == nil && len(claimRows) > 0 {
			err = ds.UpsertResourceClaims(ctx, claimRows)
		}
	}
	if err == nil && len(preemptions) > 0 {
		err = w.opts.Store.UpsertPreemptions(ctx, preemptions)
	}
	if err == nil {
		err = w.flushKueue(ctx)
	}
	if err == nil {
		err = w.flushKueueQueues(ctx)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		for _, a := range attempts {
			delete(w.attempts, a.Key)
		}
	}
	if err != nil {
		if gpusDirty {
			w.dra.inventoryDirty = true
		}
		for uid, d := range dirtyClaims {
			if _, newer := w.dra.dirty[uid]; !newer {
				w.dra.dirty[uid] = d
			}
		}
		for uid, p := range pods {
			if _, newer := w.pods[uid]; !newer {
				w.pods[uid] = p
			}
		}
		for uid, e := range events {
			if _, newer := w.events[uid]; !newer {
				w.events[uid] = e
			}
		}
		for name, n := range nodes {
			if _, newer := w.nodes[name]; !newer {
				w.nodes[name] = n
			}
		}
		for uid, g := range groups {
			if _, newer := w.dirtyG[uid]; !newer {
				w.dirtyG[uid] = g
			}
		}
		w.lifecycle = w.lifecycle || lifecycle
		return err
	}
	if lifecycle && w.opts.PodsChanged != nil {
		w.opts.PodsChanged()
	}
	// Forget what the apiserver no longer has once it is stored.
	for uid, p := range pods {
		if w.podsBy[uid] == nil && w.pods[uid] == nil && w.seen[uid] != nil && w.seen[uid].deleted {
			delete(w.seen, uid)
			delete(w.dra.uuids, uid)
			if w.condPending[uid] == nil {
				delete(w.failNotes, uid)
			}
			_ = p
		}
	}
	return nil
}

func (w *Watcher) write(ctx context.Context, pods []schedloop.Pod, jobs map[string]schedloop.Job, derive map[string]bool,
	events []schedloop.Event, attempts []schedloop.SchedulingAttempt, nodes []schedloop.Node) error {
	if len(nodes) > 0 {
		if err := w.opts.Store.UpsertNodes(ctx, nodes); err != nil {
			return err
		}
	}
	if len(jobs) > 0 {
		rows := make([]schedloop.Job, 0, len(jobs))
		for _, j := range jobs {
			rows = append(rows, j)
		}
		if err := w.opts.Store.UpsertJobs(ctx, rows); err != nil {
			return err
		}
	}
	if len(pods) > 0 {
		if err := w.opts.Store.UpsertPods(ctx, pods); err != nil {
			return err
		}
	}
	if len(derive) > 0 {
		uids := make([]string, 0, len(derive))
		for uid := range derive {
			uids = append(uids, uid)
		}
		if err := w.opts.Store.DeriveJobs(ctx, uids); err != nil {
			return err
		}
	}
	if len(events) > 0 {
		if err := w.opts.Store.UpsertEvents(ctx, events); err != nil {
			return err
		}
	}
	if len(attempts) > 0 {
		if _, err := w.opts.Store.InsertAttempts(ctx, attempts); err != nil {
			return err
		}
	}
	return nil
}

// trimForWatch drops what the watcher never reads from each object before
// its informers cache it: the managed fields, a large share of every Pod,
// Event and PodGroup held for the collector's lifetime.
func trimForWatch(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}
