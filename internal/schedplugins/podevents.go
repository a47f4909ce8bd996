package schedplugins

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"
)

// podEvents follows how far the set's own pod handlers (the queue's
// ledger, the queue order, the gang managers, the reservation book) have
// got through the scheduler's pod informer. The informer runs every
// handler on a goroutine of its own: the scheduler's queue having seen a
// change says nothing of whether these have, and a pod tried in between
// is judged on their older state (a queue still charged for a pod that
// has left, a bind the reservation book dates later than it happened).
type podEvents struct {
	mu sync.Mutex
	// handled is, per handler, the resourceVersion of the newest pod
	// change it has finished with ("" for none yet).
	handled []string
}

// track wraps inf so that the handlers added through it report what they
// have handled.
func (e *podEvents) track(inf cache.SharedIndexInformer) cache.SharedIndexInformer {
	return trackedInformer{SharedIndexInformer: inf, events: e}
}

// Handled reports whether every handler has finished with a pod change at
// resourceVersion rv or a later one. Every handler sees every pod change,
// in the order the apiserver made them, so it has then seen all before rv.
func (e *podEvents) Handled(rv string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, h := range e.handled {
		if c, err := resourceversion.CompareResourceVersion(h, rv); err != nil || c < 0 {
			return false
		}
	}
	return true
}

func (e *podEvents) add() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.handled = append(e.handled, "")
	return len(e.handled) - 1
}

func (e *podEvents) done(i int, obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	rv := m.GetResourceVersion()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.handled[i] == "" {
		e.handled[i] = rv
		return
	}
	if c, err := resourceversion.CompareResourceVersion(rv, e.handled[i]); err == nil && c > 0 {
		e.handled[i] = rv
	}
}

type trackedInformer struct {
	cache.SharedIndexInformer
	events *podEvents
}

func (t trackedInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	i := t.events.add()
	return t.SharedIndexInformer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			h.OnAdd(obj, initial)
			t.events.done(i, obj)
		},
		UpdateFunc: func(old, cur any) {
			h.OnUpdate(old, cur)
			t.events.done(i, cur)
		},
		DeleteFunc: func(obj any) {
			h.OnDelete(obj)
			t.events.done(i, obj)
		},
	})
}
