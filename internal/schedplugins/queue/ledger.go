package queue

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/schedloop/schedloop/internal/scoring"
)

// ledger is what each queue holds now, in milli-GPU as scoring.QueueUsage
// counts it (a GPU share counts its share): pods bound (from the informer)
// or holding a reservation in this scheduler. A gang counts at least its
// declared size (minMember × milli-GPU per member) from its first
// reservation, as the simulator counts a gang's whole demand once it starts,
// so a half-placed gang cannot be overtaken by pods that would stop it
// completing within the limit.
type ledger struct {
	mu     sync.Mutex
	pods   map[types.UID]entry
	queues map[string]*usage
}

type entry struct {
	queue, gang string // gang "" for a single pod
	milli       int64
	declared    int64 // the gang's declared milli-GPU
}

type usage struct {
	single int64
	gangs  map[string]*gangUsage
}

type gangUsage struct {
	milli, declared int64
	members         int
}

func (g *gangUsage) held() int64 { return max(g.milli, g.declared) }

func newLedger() *ledger {
	return &ledger{pods: map[types.UID]entry{}, queues: map[string]*usage{}}
}

func (l *ledger) add(uid types.UID, e entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pods[uid]; ok {
		return
	}
	l.pods[uid] = e
	q := l.queues[e.queue]
	if q == nil {
		q = &usage{gangs: map[string]*gangUsage{}}
		l.queues[e.queue] = q
	}
	if e.gang == "" {
		q.single += e.milli
		return
	}
	g := q.gangs[e.gang]
	if g == nil {
		g = &gangUsage{}
		q.gangs[e.gang] = g
	}
	g.milli += e.milli
	g.members++
	g.declared = max(g.declared, e.declared)
}

func (l *ledger) remove(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.pods[uid]
	if !ok {
		return
	}
	delete(l.pods, uid)
	q := l.queues[e.queue]
	if e.gang == "" {
		q.single -= e.milli
		return
	}
	g := q.gangs[e.gang]
	g.milli -= e.milli
	g.members--
	if g.members == 0 {
		delete(q.gangs, e.gang)
	}
}

// extra is what e's queue holds now and what admitting e would add to it:
// demand is the milli-GPU it adds (the rest of its gang's declared size for
// a gang's first member, nothing for a later member within it) and newGang
// whether it starts a gang the queue does not hold yet.
func (l *ledger) extra(e entry) (used scoring.QueueUsage, demand int64, newGang bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[e.queue]
	if q != nil {
		used.GPUMilli = q.single
		for _, g := range q.gangs {
			used.GPUMilli += g.held()
		}
		used.RunningGangs = len(q.gangs)
	}
	if e.gang == "" {
		return used, e.milli, false
	}
	if q != nil {
		if g := q.gangs[e.gang]; g != nil {
			return used, max(g.milli+e.milli, g.declared) - g.held(), false
		}
	}
	return used, max(e.milli, e.declared), true
}
