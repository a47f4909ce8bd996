package schedplugins

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/pkg/features"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/schedloop/schedloop/internal/schedplugins/gang"
	"github.com/schedloop/schedloop/internal/schedplugins/gang/core"
	"github.com/schedloop/schedloop/internal/schedplugins/nodeview"
	"github.com/schedloop/schedloop/internal/schedplugins/preemption"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/schedplugins/queue"
	"github.com/schedloop/schedloop/internal/schedplugins/queuesort"
	"github.com/schedloop/schedloop/internal/schedplugins/reservation"
	"github.com/schedloop/schedloop/internal/schedplugins/topology"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Set is one scheduler's worth of schedloop plugins: they share one profile
// holder and one queue order, and the plugins of one scheduling profile
// share one gang manager.
//
// Gang managers are per profile on purpose. A manager's reservations,
// plans and backoffs describe placements its own profile's framework made:
// Permit holds and releases members through that framework's waiting pods
// (fwk.Handle.IterateOverWaitingPods, Activate), which another profile's
// handle cannot see. A gang's members all name one schedulerName, so one
// profile places the whole gang and nothing needs sharing across profiles;
// the price of two profiles both enabling the plugins is a second PodGroup
// informer and status writer.
type Set struct {
	Profile *profilewatch.Holder
	// Reservations is the scheduler's reservation book, shared by every
	// profile (one head of the order, one reservation).
	Reservations *reservation.Book
	// now is the clock reservations are planned on and preemption measures
	// run times on (nil: time.Now).
	now func() time.Time

	mu       sync.Mutex
	managers map[fwk.Handle]*core.Manager
	dras     map[fwk.Handle]*nodeview.DRA
	order    *queuesort.Order
	watching bool
	pods     podEvents
	// trackPods: podInformer follows the handlers added through it.
	trackPods atomic.Bool
}

// NewSet returns a Set starting from the default profile.
func NewSet() *Set { return NewSetWithClock(nil) }

// NewSetWithClock is NewSet with the clock reservations are planned on and
// preemption measures run times on (nil: time.Now): arrivals, binds,
// predicted ends, the reservation threshold, the preemption minimum run
// time and the GPU-hours a victim loses all read it.
func NewSetWithClock(now func() time.Time) *Set {
	holder := profilewatch.NewHolder()
	return &Set{Profile: holder, Reservations: reservation.New(holder, now), managers: map[fwk.Handle]*core.Manager{}, dras: map[fwk.Handle]*nodeview.DRA{}, now: now}
}

// Registry is every plugin of the set by name, as kube-scheduler's
// out-of-tree registry takes them.
func (s *Set) Registry() frameworkruntime.Registry {
	return frameworkruntime.Registry{
		profilewatch.Name: s.newProfile,
		gang.Name:         s.newGang,
		topology.Name:     s.newTopology,
		queue.Name:        s.newQueue,
		queuesort.Name:    s.newQueueSort,
		preemption.Name:   s.newPreemption,
	}
}

// Options registers every plugin of the set with kube-scheduler.
func (s *Set) Options() []app.Option {
	var out []app.Option
	for name, factory := range s.Registry() {
		out = append(out, app.WithPlugin(name, factory))
	}
	return out
}

// Options registers a fresh Set's plugins: what cmd/scheduler uses.
func Options() []app.Option { return NewSet().Options() }

func (s *Set) newProfile(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	return profilewatch.New(ctx, obj, h, s.Profile)
}

func (s *Set) newGang(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := gang.DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	mgr, err := s.manager(ctx, h)
	if err != nil {
		return nil, err
	}
	mgr.SetBackoff(time.Duration(args.BackoffSeconds) * time.Second)
	d, err := s.dra(h)
	if err != nil {
		return nil, err
	}
	return gang.New(obj, mgr, s.Profile, d)
}

func (s *Set) newTopology(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	mgr, err := s.manager(ctx, h)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.watching && h.SharedInformerFactory() != nil {
		if err := s.Reservations.Watch(s.podInformer(h)); err != nil {
			return nil, fmt.Errorf("%s: watch pods for reservations: %w", topology.Name, err)
		}
		s.watching = true
	}
	// The book wakes the pods it turned away through the gang manager, which
	// ends a Workload API gang's gate before activating its members.
	s.Reservations.Use(nil, mgr, h.EventRecorder())
	d, err := s.draLocked(h)
	if err != nil {
		return nil, err
	}
	return topology.New(obj, h, mgr, s.Profile, s.Reservations, d)
}

func (s *Set) newQueue(ctx context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	mgr, err := s.manager(ctx, h)
	if err != nil {
		return nil, err
	}
	d, err := s.dra(h)
	if err != nil {
		return nil, err
	}
	q, err := queue.New(s.podInformer(h), mgr, s.Profile, d)
	if err != nil {
		return nil, err
	}
	q.WakeOnLimitChange(h, h.ProfileName())
	return q, nil
}

func (s *Set) newQueueSort(_ context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.order == nil {
		d, err := s.draLocked(h)
		if err != nil {
			return nil, err
		}
		// Every profile of a scheduler shares one informer factory: the
		// first profile's pod informer serves them all.
		o, err := queuesort.NewOrder(s.podInformer(h),
			queuesort.Options{Profile: s.Profile, GangSize: s.GangSize, Claims: d, Effective: s.effective})
		if err != nil {
			return nil, err
		}
		s.order = o
		s.Reservations.Use(o, nil, nil)
	}
	return queuesort.New(obj, s.order)
}

func (s *Set) newPreemption(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	d, err := s.dra(h)
	if err != nil {
		return nil, err
	}
	p, err := preemption.New(ctx, obj, h, s.Profile, s.now, d)
	if err != nil {
		return nil, err
	}
	p.Effective = s.effective
	return p, nil
}

// podInformer is the scheduler's pod informer as the set's plugins watch
// it: what their handlers have handled is followed (PodsHandled) where
// TrackPods asked for it.
func (s *Set) podInformer(h fwk.Handle) cache.SharedIndexInformer {
	inf := h.SharedInformerFactory().Core().V1().Pods().Informer()
	if !s.trackPods.Load() {
		return inf
	}
	return s.pods.track(inf)
}

// TrackPods has the set follow how far its plugins' pod handlers have got
// (PodsHandled). It must be called before the scheduler builds the
// plugins. Following costs every handler a lock and a resourceVersion
// comparison on every pod change (BenchmarkPodEvent), which only a caller
// waiting on PodsHandled needs.
func (s *Set) TrackPods() { s.trackPods.Store(true) }

// PodsHandled reports whether the set's plugins have finished with every
// pod change up to the one at resourceVersion rv (a resourceVersion of the
// pods the scheduler watches); always false unless TrackPods was called.
// Their informer handlers run apart from the scheduler's own, so a change
// the scheduling queue has seen may not have reached them yet; a caller
// that changes pods and wants the next scheduling decisions to rest on
// every change waits for this too.
func (s *Set) PodsHandled(rv string) bool { return s.trackPods.Load() && s.pods.Handled(rv) }

// effective is pod with its Workload API gang's metadata inherited
// (core.Manager.Effective); every profile's manager reads the same
// informers, so any one serves.
func (s *Set) effective(pod *v1.Pod) *v1.Pod {
	s.mu.Lock()
	var m *core.Manager
	for _, m = range s.managers {
		break
	}
	s.mu.Unlock()
	return m.Effective(pod)
}

// GangSize is a gang's minMember from whichever profile's gang manager
// knows its group object (either API); false while none has seen it. The
// managers follow group objects on informers of their own, so a gang
// whose group was just made may be refused as having none until then.
func (s *Set) GangSize(namespace, name string) (int, bool) {
	s.mu.Lock()
	managers := make([]*core.Manager, 0, len(s.managers))
	for _, m := range s.managers {
		managers = append(managers, m)
	}
	s.mu.Unlock()
	for _, m := range managers {
		if n, ok := m.Size(namespace, name); ok {
			return n, true
		}
	}
	return 0, false
}

// manager returns the gang manager of h's scheduling profile, making it on
// first use.
func (s *Set) manager(ctx context.Context, h fwk.Handle) (*core.Manager, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.managers[h]; m != nil {
		return m, nil
	}
	dyn, err := dynamic.NewForConfig(h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("podgroup client: %w", err)
	}
	o := core.Options{
		Handle: h, PodInformer: s.podInformer(h), NodeInformer: h.SharedInformerFactory().Core().V1().Nodes().Informer(),
		Dynamic: dyn, Backoff: scoring.DefaultGangBackoff, SchedulerName: h.ProfileName(),
		// A released gang's backoff runs on the clock reservations are
		// planned on, as a replay's does.
		Now: s.now,
	}
	// The scheduler watches the Workload API's PodGroups itself where
	// GenericWorkload is on; sharing its informer costs nothing. Where it is
	// off, asking the shared factory for one would have the scheduler wait
	// at start-up for an API that may not be served.
	if utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		o.WorkloadPodGroups = h.SharedInformerFactory().Scheduling().V1beta1().PodGroups().Lister()
		o.Workloads = h.SharedInformerFactory().Scheduling().V1beta1().Workloads().Lister()
	}
	m, err := core.New(ctx, o)
	if err != nil {
		return nil, err
	}
	s.managers[h] = m
	return m, nil
}

// dra is the DRA reader of h's scheduler, one for all its plugins: they
// count a pod's ResourceClaim GPUs and a node's published GPUs alike.
func (s *Set) dra(h fwk.Handle) (*nodeview.DRA, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draLocked(h)
}

func (s *Set) draLocked(h fwk.Handle) (*nodeview.DRA, error) {
	if d, ok := s.dras[h]; ok {
		return d, nil
	}
	if h.SharedInformerFactory() == nil {
		return nil, nil
	}
	d, err := nodeview.NewDRA(h.SharedInformerFactory())
	if err != nil {
		return nil, err
	}
	s.dras[h] = d
	return d, nil
}
