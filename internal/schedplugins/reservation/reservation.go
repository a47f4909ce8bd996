// Package reservation is the live scheduler's book of the one standing
// reservation (EASY backfilling; the rule is internal/scoring's
// PlanReservation, TakesReservation, ReservationBinds and BackfillAdmits,
// the functions the simulator replays). It remembers which job holds the
// reservation, the nodes and the predicted start, when each waiting job
// arrived and when each running pod was bound, all on one clock, and it
// tells the holder's pod (an Event, reason Reserved) and the pods it turns
// away (activated again when the reservation moves or is released).
//
// It holds no rule and places nothing: SchedloopTopology plans the
// reservation over its node views and asks the book, in Filter, whether a
// node is open to a pod.
package reservation

import (
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/reasons"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Event reasons on the holder's pod.
const (
	// ReasonReserved: the job holds the reservation (each new plan).
	ReasonReserved = "Reserved"
	// ReasonReleased: the reservation ended without the job starting
	// (its pods deleted, reservations turned off, another job ahead).
	ReasonReleased = "ReservationReleased"
)

// Jobs is what the book needs of the queue order: a waiting pod's job key
// and predicted run time, and a running pod's predicted run time
// (queuesort.Order).
type Jobs interface {
	Job(pod *v1.Pod, now time.Time) (scoring.QueueKey, time.Duration)
	RunTime(pod *v1.Pod) time.Duration
}

// Activator moves pods back to the active queue (fwk.Handle.Activate).
type Activator interface {
	Activate(logger klog.Logger, pods map[string]*v1.Pod)
}

// Held is a standing reservation.
type Held struct {
	// Job is the holder: "namespace/pod-group" for a gang, "namespace/pod"
	// for a lone pod.
	Job string
	// Key is the holder's place in the order.
	Key scoring.QueueKey
	// Start is the predicted start; Nodes the nodes it takes then, sorted.
	Start time.Time
	Nodes []string
	// Planned is when it was last planned.
	Planned time.Time
	// Pod is the holder's pod the reservation was planned for.
	Pod types.NamespacedName
}

// Message is the Reserved Event's note.
func (h *Held) Message() string {
	return reasons.Reservation{Start: h.Start, Nodes: h.Nodes}.String()
}

// Book is the scheduler's reservation book.
type Book struct {
	profile *profilewatch.Holder
	now     func() time.Time

	mu       sync.Mutex
	jobs     Jobs
	activate Activator
	recorder events.EventRecorder
	// arrived is each waiting job's arrival on the book's clock; bound
	// each bound pod's bind.
	arrived map[string]time.Time
	bound   map[types.UID]time.Time
	cur     *Held
	curPod  *v1.Pod
	// planState is the cluster state cur was planned on (see State) and
	// planNext the first predicted end after it was planned (refresh).
	planState uint64
	planNext  time.Time
	// refused are pods Filter turned away under cur, woken when it moves.
	refused map[types.UID]*v1.Pod
	// waitingOf counts each job's pods that wait, so a job whose last
	// waiting pod is deleted releases its reservation.
	waitingOf map[string]sets.Set[types.UID]
}

// New returns a book reading the profile from holder on the clock now (nil:
// time.Now). Wire it with Watch and Use before the scheduler starts.
func New(holder *profilewatch.Holder, now func() time.Time) *Book {
	if now == nil {
		now = time.Now
	}
	b := &Book{profile: holder, now: now, arrived: map[string]time.Time{}, bound: map[types.UID]time.Time{},
		refused: map[types.UID]*v1.Pod{}, waitingOf: map[string]sets.Set[types.UID]{}}
	holder.OnSwap(func(_, cur *profilewatch.Active) {
		if !cur.Params.Reservation {
			b.Release("reservations are off in the active profile")
		}
	})
	return b
}

// Now is the book's clock.
func (b *Book) Now() time.Time { return b.now() }

// Use sets the queue order, the activator and the Event recorder (the
// first profile's; later calls change nothing already set).
func (b *Book) Use(jobs Jobs, activate Activator, recorder events.EventRecorder) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.jobs == nil && jobs != nil {
		b.jobs = jobs
	}
	if b.activate == nil && activate != nil {
		b.activate = activate
	}
	if b.recorder == nil && recorder != nil {
		b.recorder = recorder
	}
}

// Watch follows pods through the scheduler's pod informer.
func (b *Book) Watch(inf cache.SharedIndexInformer) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { b.podChanged(obj, false) },
		UpdateFunc: func(_, cur any) { b.podChanged(cur, false) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			b.podChanged(obj, true)
		},
	})
	return err
}

// JobOf is the job pod belongs to, as Held.Job names it.
func JobOf(pod *v1.Pod) string {
	if key, _, ok := podspec.GangKey(pod); ok {
		return key
	}
	return pod.Namespace + "/" + pod.Name
}

func (b *Book) podChanged(obj any, deleted bool) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	job := JobOf(pod)
	now := b.now()
	b.mu.Lock()
	var note string
	var woken map[string]*v1.Pod
	switch {
	case deleted || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed:
		delete(b.bound, pod.UID)
		delete(b.refused, pod.UID)
		if w := b.waitingOf[job]; w != nil {
			w.Delete(pod.UID)
			if w.Len() == 0 {
				delete(b.waitingOf, job)
				delete(b.arrived, job)
				if b.cur != nil && b.cur.Job == job && pod.Spec.NodeName == "" {
					note = "the job's pods were deleted"
				}
			}
		}
	case pod.Spec.NodeName != "":
		if _, seen := b.bound[pod.UID]; !seen {
			at := now
			// A pod bound before the book saw it (a scheduler restart)
			// started when its status says, if that is earlier.
			if _, waited := b.waitingOf[job]; !waited && pod.Status.StartTime != nil && pod.Status.StartTime.Time.Before(at) {
				at = pod.Status.StartTime.Time
			}
			b.bound[pod.UID] = at
		}
		delete(b.refused, pod.UID)
		if w := b.waitingOf[job]; w != nil {
			w.Delete(pod.UID)
			if w.Len() == 0 {
				delete(b.waitingOf, job)
				delete(b.arrived, job)
			}
		}
		woken = b.startedLocked(job)
	default:
		if _, seen := b.arrived[job]; !seen {
			b.arrived[job] = now
		}
		if b.waitingOf[job] == nil {
			b.waitingOf[job] = sets.New[types.UID]()
		}
		b.waitingOf[job].Insert(pod.UID)
	}
	activate := b.activate
	b.mu.Unlock()
	if activate != nil && len(woken) > 0 {
		activate.Activate(klog.Background(), woken)
	}
	if note != "" {
		b.Release(note)
	}
}

// Arrived is when pod's job arrived on the book's clock: when the book
// first saw one of its pods waiting. A pod's creation time is not used: it
// has a resolution of a second, too coarse to order jobs created together,
// and on another clock than the book's. A scheduler that restarts sees its
// waiting jobs arrive again.
func (b *Book) Arrived(pod *v1.Pod) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if at, ok := b.arrived[JobOf(pod)]; ok {
		return at
	}
	return b.now()
}

// Bound is when a bound pod was bound, on the book's clock; false when the
// book has not seen it bound (a pod assumed by this scheduler and not yet
// bound, as a gang's members waiting at Permit are).
func (b *Book) Bound(uid types.UID) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.bound[uid]
	return at, ok
}

// RunTime is a running pod's predicted run time.
func (b *Book) RunTime(pod *v1.Pod) time.Duration {
	b.mu.Lock()
	jobs := b.jobs
	b.mu.Unlock()
	if jobs == nil {
		return 0
	}
	return jobs.RunTime(pod)
}

// Current is the standing reservation, nil when none stands or the active
// profile has reservations off.
func (b *Book) Current() *Held {
	if !b.profile.Load().Params.Reservation {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur == nil {
		return nil
	}
	h := *b.cur
	h.Nodes = slices.Clone(h.Nodes)
	return &h
}

// Restriction is what the reservation asks of one pod in one cycle.
type Restriction struct {
	// Job is the holder (Held.Job).
	Job   string
	Nodes sets.Set[string]
	// Start and End are the reservation's start and the pod's predicted
	// end (Unix nanoseconds).
	Start, End int64
}

// Admits is scoring.BackfillAdmits for node.
func (r *Restriction) Admits(node string) bool {
	return scoring.BackfillAdmits(r.Nodes.Has(node), r.End, r.Start)
}

// For is the restriction the standing reservation puts on pod now, nil
// when it puts none: none stands, pod belongs to the holder, or pod's job
// is ahead of the holder (scoring.ReservationBinds). A reservation planned
// at an earlier instant on a cluster that has changed since (cluster, see
// refresh) is planned again first.
func (b *Book) For(pod *v1.Pod, cluster State, plan Plan) *Restriction {
	params := b.profile.Load().Params
	if !params.Reservation {
		return nil
	}
	b.mu.Lock()
	cur, jobs := b.cur, b.jobs
	b.mu.Unlock()
	if cur == nil || jobs == nil || cur.Job == JobOf(pod) {
		return nil
	}
	now := b.now()
	key, run := jobs.Job(pod, now)
	if !scoring.ReservationBinds(params, now.UnixNano(), cur.Key, key) {
		return nil
	}
	b.refresh(cluster, now, plan)
	b.mu.Lock()
	cur = b.cur
	b.mu.Unlock()
	if cur == nil {
		return nil
	}
	return &Restriction{Job: cur.Job, Nodes: sets.New(cur.Nodes...), Start: cur.Start.UnixNano(), End: now.Add(run).UnixNano()}
}

// Refused notes that Filter turned pod away from a reserved node, so it is
// tried again when the reservation moves or ends.
func (b *Book) Refused(pod *v1.Pod) {
	b.mu.Lock()
	b.refused[pod.UID] = pod
	b.mu.Unlock()
}

// State answers a fingerprint of everything a Plan reads of the cluster
// (nodes, the pods on them, which of them wait at Permit): equal answers,
// the same plan. It is asked only when the book may plan again.
type State func() uint64

// Plan plans pod's job's reservation at now: the nodes and start, or ok
// false when the job would not fit even with every running job ended. next
// is the earliest predicted end of a running job after now (zero: none),
// when the plan can change with no change to the cluster.
type Plan func(pod *v1.Pod, now time.Time) (nodes []string, start, next time.Time, ok bool)

// Failed is called when pod could not be placed, with cluster the
// cluster's state (see State). When its job takes the reservation
// (scoring.TakesReservation, or it holds it already) the reservation is
// planned again with plan.
func (b *Book) Failed(pod *v1.Pod, cluster State, plan Plan) {
	params := b.profile.Load().Params
	if !params.Reservation {
		return
	}
	job := JobOf(pod)
	now := b.now()
	b.mu.Lock()
	jobs, cur := b.jobs, b.cur
	b.mu.Unlock()
	if jobs == nil {
		return
	}
	arrived := b.Arrived(pod)
	key, _ := jobs.Job(pod, now)
	var holder *scoring.QueueKey
	if cur != nil && cur.Job != job {
		holder = &cur.Key
	}
	if !scoring.TakesReservation(params, now.UnixNano(), arrived.UnixNano(), key, holder) {
		return
	}
	b.replan(pod, key, cluster(), now, plan)
}

// refresh plans the standing reservation again when time has moved on and
// the cluster has changed since it was planned (cluster's answer differs:
// nodes or the pods on them changed) or a running job's predicted end has passed (a job
// predicted to have ended is expected at any moment, so what the head job
// could take now grows). A replay plans it again on each pass at
// the head job's turn, after the jobs ahead of it were tried, and holds
// the later jobs of that pass to that plan. Live, the head job's own
// failures plan it again at its turn (Failed), and so does the first job
// after it tried at a later instant, by which time the jobs ahead of the
// head job have been tried. Placements made at the same instant do not move
// it, as the later jobs of one pass are held to one plan.
func (b *Book) refresh(cluster State, now time.Time, plan Plan) {
	b.mu.Lock()
	cur, pod, planned := b.cur, b.curPod, b.planState
	due := !b.planNext.IsZero() && !now.Before(b.planNext)
	b.mu.Unlock()
	if cur == nil || pod == nil || !now.After(cur.Planned) {
		return
	}
	state := cluster()
	if state == planned && !due {
		return
	}
	b.replan(pod, cur.Key, state, now, plan)
}

func (b *Book) replan(pod *v1.Pod, key scoring.QueueKey, state uint64, now time.Time, plan Plan) {
	job := JobOf(pod)
	nodes, start, next, ok := plan(pod, now)
	if !ok {
		b.mu.Lock()
		held := b.cur != nil && b.cur.Job == job
		b.mu.Unlock()
		if held {
			b.Release("the job no longer fits even once every running job has ended")
		}
		return
	}
	slices.Sort(nodes)
	h := &Held{Job: job, Key: key, Start: start, Nodes: nodes, Planned: now,
		Pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}}
	b.mu.Lock()
	b.planState, b.planNext = state, next
	prev, prevPod := b.cur, b.curPod
	same := prev != nil && prev.Job == h.Job && prev.Start.Equal(h.Start) && slices.Equal(prev.Nodes, h.Nodes)
	if same {
		b.cur = h
		b.mu.Unlock()
		return
	}
	b.cur, b.curPod = h, pod
	woken := b.takeRefusedLocked()
	recorder, activate := b.recorder, b.activate
	b.mu.Unlock()
	if recorder != nil {
		if prev != nil && prev.Job != h.Job && prevPod != nil {
			recorder.Eventf(prevPod, nil, v1.EventTypeNormal, ReasonReleased, "Reserve",
				"reservation passed to %s, ahead in the order", h.Job)
		}
		recorder.Eventf(pod, nil, v1.EventTypeNormal, ReasonReserved, "Reserve", "%s", h.Message())
	}
	if activate != nil && len(woken) > 0 {
		activate.Activate(klog.Background(), woken)
	}
}

// Started notes that job's every member is placed (assumed, its binding
// under way): its reservation is spent from that instant, as a replay's
// job that starts leaves the pass's later failures to plan the next one,
// and the pods it turned away are tried again. Waiting for the binds to
// be seen would leave the started job holding the reservation through the
// rest of the instant, so the next job that cannot start would not take it.
func (b *Book) Started(job string) {
	b.mu.Lock()
	woken := b.startedLocked(job)
	activate := b.activate
	b.mu.Unlock()
	if activate != nil && len(woken) > 0 {
		activate.Activate(klog.Background(), woken)
	}
}

// startedLocked ends the reservation job holds, if it holds it, and
// returns the pods to wake.
func (b *Book) startedLocked(job string) map[string]*v1.Pod {
	if b.cur == nil || b.cur.Job != job {
		return nil
	}
	b.clearLocked()
	return b.takeRefusedLocked()
}

// Release ends the standing reservation, telling its pod why.
func (b *Book) Release(why string) {
	b.mu.Lock()
	prev, prevPod := b.cur, b.curPod
	if prev == nil {
		b.mu.Unlock()
		return
	}
	b.clearLocked()
	woken := b.takeRefusedLocked()
	recorder, activate := b.recorder, b.activate
	b.mu.Unlock()
	if recorder != nil && prevPod != nil {
		recorder.Eventf(prevPod, nil, v1.EventTypeNormal, ReasonReleased, "Reserve", "reservation released: %s", why)
	}
	if activate != nil && len(woken) > 0 {
		activate.Activate(klog.Background(), woken)
	}
}

func (b *Book) clearLocked() { b.cur, b.curPod = nil, nil }

func (b *Book) takeRefusedLocked() map[string]*v1.Pod {
	if len(b.refused) == 0 {
		return nil
	}
	out := make(map[string]*v1.Pod, len(b.refused))
	for uid, p := range b.refused {
		out[p.Namespace+"/"+p.Name] = p
		delete(b.refused, uid)
	}
	return out
}
