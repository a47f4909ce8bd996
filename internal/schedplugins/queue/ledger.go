package queue

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// ledger is what each queue holds now: pods bound (from the informer) or
// holding a reservation in this scheduler. A gang counts at least its
// declared size (minMember × GPUs per member) from its first reservation,
// so a half-placed gang cannot be overtaken by pods that would stop it
// completing within the limit.
type ledger struct {
	mu     sync.Mutex
	pods   map[types.UID]entry
	queues map[string]*usage
}

type entry struct {
	queue, gang string // gang "" for a single pod
	gpus        int
	declared    int // the gang's declared GPUs
}

type usage struct {
	single int
	gangs  map[string]*gangUsage
}

type gangUsage struct {
	gpus, declared, members int
}

func (g *gangUsage) held() int { return max(g.gpus, g.declared) }

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
		q.single += e.gpus
		return
	}
	g := q.gangs[e.gang]
	if g == nil {
		g = &gangUsage{}
		q.gangs[e.gang] = g
	}
	g.gpus += e.gpus
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
		q.single -= e.gpus
		return
	}
	g := q.gangs[e.gang]
	g.gpus -= e.gpus
	g.members--
	if g.members == 0 {
		delete(q.gangs, e.gang)
	}
}

// extra is how many GPUs (and gangs) admitting e would add to its queue,
// and the queue's current use.
func (l *ledger) extra(e entry) (used, addGPUs, gangs, addGangs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[e.queue]
	if q != nil {
		used = q.single
		for _, g := range q.gangs {
			used += g.held()
		}
		gangs = len(q.gangs)
	}
	if e.gang == "" {
		return used, e.gpus, gangs, 0
	}
	if q != nil {
		if g := q.gangs[e.gang]; g != nil {
			after := max(g.gpus+e.gpus, g.declared)
			return used, after - g.held(), gangs, 0
		}
	}
	return used, max(e.gpus, e.declared), gangs, 1
}
