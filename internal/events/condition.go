package events

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/schedloop/schedloop"
)

// kube-scheduler reports each failure twice: as a FailedScheduling Event and
// in the pod's PodScheduled=False condition. client-go's event recorder
// folds an Event into the previous one on the same pod resourceVersion,
// reason and reporter, counting it and keeping the previous note, so a pod
// retried before the scheduler's status write of its last failure reached
// the scheduler's informer has its new failure's message in the condition
// only. The condition is read as a second source of attempts for that case.

// conditionGrace is how long a condition's message waits for the Event that
// normally reports the same failure before it is stored as an attempt of its
// own; it is also how far apart the two may lie in time and still be one
// failure. The recorder sends an Event within moments of the failure.
const conditionGrace = 30 * time.Second

// condFailure is a failure message read from a pod's PodScheduled condition,
// waiting to learn whether an Event recorded it.
type condFailure struct {
	podUID, message string
	at              time.Time // stored axis
	// wall is at before mapping (WatchOptions.MapTime), the axis the Event
	// is matched on: an accelerated replay stretches a real lag.
	wall time.Time
	seen time.Time // watcher's clock, for the grace
	// relisted: first read from a pod the watcher had not seen before (a
	// restart's re-list), when the time is the condition's last transition,
	// possibly well before this message; any Event with the message then
	// stands for it, whenever it was.
	relisted bool
}

// failureNote is the message and time span of one FailedScheduling Event
// about a pod, before mapping.
type failureNote struct {
	message     string
	first, last time.Time
}

// failingCondition is the message of pod's PodScheduled condition when it
// reports a scheduling failure, "" otherwise.
func failingCondition(pod *corev1.Pod) (string, time.Time) {
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.PodScheduled {
			continue
		}
		if c.Status == corev1.ConditionFalse &&
			(c.Reason == corev1.PodReasonUnschedulable || c.Reason == corev1.PodReasonSchedulerError) {
			return c.Message, c.LastTransitionTime.Time
		}
		return "", time.Time{}
	}
	return "", time.Time{}
}

// sameFailure reports whether an Event's note is a condition's message: the
// scheduler writes the message whole in the condition and shortens the note
// to the Event's length limit, ending it in " ...".
func sameFailure(note, message string) bool {
	if note == message {
		return true
	}
	head, cut := strings.CutSuffix(note, " ...")
	return cut && head != "" && strings.HasPrefix(message, head)
}

// recorded reports whether one of notes is the Event that reported c.
func (c condFailure) recorded(notes map[string]failureNote) bool {
	for _, n := range notes {
		if !sameFailure(n.message, c.message) {
			continue
		}
		if c.relisted || !c.wall.Before(n.first.Add(-conditionGrace)) && !c.wall.After(n.last.Add(conditionGrace)) {
			return true
		}
	}
	return false
}

// attempt is the attempt c records, parsed as its Event's note would be.
func (c condFailure) attempt(parser *Parser) schedloop.SchedulingAttempt {
	a := schedloop.SchedulingAttempt{Key: c.podUID + "/condition/" + strconv.FormatInt(c.at.UnixNano(), 10),
		PodUID: c.podUID, At: c.at, Message: c.message}
	failedAttempt(&a, parser)
	return a
}

// observeCondition queues the failure message in pod's condition when it is
// new for the pod. Called with w.mu held; firstSight: the watcher had not
// seen the pod before.
func (w *Watcher) observeCondition(pod *corev1.Pod, s *podSeen, firstSight bool, now time.Time) {
	msg, transition := failingCondition(pod)
	if msg == "" || msg == s.condMessage {
		s.condMessage = msg
		return
	}
	// The condition's transition time is that of its first failure; a
	// later message rewrites it without a transition and is dated by the
	// watch.
	var api time.Time
	if s.condMessage == "" {
		api = transition
	}
	s.condMessage = msg
	c := condFailure{podUID: string(pod.UID), message: msg, at: w.clock.refine(api, now),
		wall: unmapped(w.clock).refine(api, now), seen: now, relisted: firstSight}
	w.condPending[c.podUID] = append(w.condPending[c.podUID], c)
}

// unmapped is c without its mapping onto the stored axis.
func unmapped(c clock) clock {
	c.mapTime = func(t time.Time) time.Time { return t }
	return c
}

// noteFailure remembers a FailedScheduling Event's note for the pod it is
// about; e is ev as stored, observed when the watcher saw ev's latest count.
// Called with w.mu held.
func (w *Watcher) noteFailure(e schedloop.Event, ev *corev1.Event, observed time.Time) {
	if e.InvolvedKind != "Pod" || e.InvolvedUID == "" || (e.Reason != reasonFailedScheduling && e.Reason != reasonUnschedulable) {
		return
	}
	notes := w.failNotes[e.InvolvedUID]
	if notes == nil {
		notes = map[string]failureNote{}
		w.failNotes[e.InvolvedUID] = notes
	}
	_, first, last := unmapped(w.clock).eventTimes(ev, observed)
	notes[e.UID] = failureNote{message: e.Message, first: first, last: last}
}

// resolveConditions drops the queued condition failures an Event recorded
// and turns those still unrecorded after the grace into attempts. Called
// with w.mu held, after the flush's Events were noted.
func (w *Watcher) resolveConditions(now time.Time) {
	for uid, pending := range w.condPending {
		keep := pending[:0]
		for _, c := range pending {
			switch {
			case c.recorded(w.failNotes[uid]):
			case now.Sub(c.seen) >= conditionGrace:
				a := c.attempt(w.opts.Parser)
				w.attempts[a.Key] = a
			default:
				keep = append(keep, c)
			}
		}
		if len(keep) == 0 {
			delete(w.condPending, uid)
			if w.seen[uid] == nil {
				delete(w.failNotes, uid) // the pod is gone and forgotten
			}
		} else {
			w.condPending[uid] = keep
		}
	}
}
