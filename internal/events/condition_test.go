package events

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/reasons"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// conditionHarness drives a watcher by hand on a clock the test moves: the
// informers are not run, their notifications are handed to handle.
type conditionHarness struct {
	t   *testing.T
	w   *Watcher
	now time.Time
}

// newConditionHarness makes a watcher storing into a fresh database;
// mapTime, when set, is its WatchOptions.MapTime.
func newConditionHarness(t *testing.T, mapTime func(time.Time) time.Time) (*conditionHarness, *store.Store) {
	st := storetest.New(t)
	h := &conditionHarness{t: t}
	w, err := NewWatcher(WatchOptions{Client: fake.NewClientset(), Store: st, Now: func() time.Time { return h.now }, MapTime: mapTime})
	if err != nil {
		t.Fatal(err)
	}
	h.w = w
	return h, st
}

func (h *conditionHarness) at(t time.Time) *conditionHarness { h.now = t; return h }

func (h *conditionHarness) see(kind string, obj any) { h.w.handle(kind, obj, false) }

func (h *conditionHarness) flush() {
	h.t.Helper()
	if err := h.w.Flush(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func conditionPod(uid string, created time.Time, rv, message string, transition time.Time) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ml", UID: types.UID(uid), ResourceVersion: rv,
			CreationTimestamp: metav1.NewTime(created)},
		Spec:   corev1.PodSpec{SchedulerName: "schedloop", Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if message != "" {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: message, LastTransitionTime: metav1.NewTime(transition)}}
	}
	return p
}

// failedEvent is a FailedScheduling Event as client-go's events library
// writes it: a repeat on the same key counts up its series and keeps the
// first note.
func failedEvent(uid, podUID, rv, note string, first time.Time, count int32, last time.Time) *corev1.Event {
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: uid, Namespace: "ml", UID: types.UID(uid), ResourceVersion: rv},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: podUID, Namespace: "ml", UID: types.UID(podUID)},
		Reason:         reasonFailedScheduling, Type: corev1.EventTypeWarning, Message: note,
		EventTime:           metav1.NewMicroTime(first),
		ReportingController: "schedloop",
	}
	if count > 1 {
		e.Series = &corev1.EventSeries{Count: count, LastObservedTime: metav1.NewMicroTime(last)}
	}
	return e
}

// TestConditionCarriesTheFailureAFoldedEventHides: a gang member fails for
// its incomplete gang, then, retried before the scheduler's status write
// reached its informer, for topology. The events library folds the second
// failure into the first Event (count 2, the old note); only the pod's
// PodScheduled condition has the topology message. The stored wait turns
// to topology when the watcher saw that message. A second pod, whose
// second failure got its own Event, delivered after the pod update, gets
// no attempt from its condition: each failure is stored once.
func TestConditionCarriesTheFailureAFoldedEventHides(t *testing.T) {
	ctx := context.Background()
	h, st := newConditionHarness(t, nil)
	gang := "0/4 nodes are available: " + reasons.GangIncomplete("ml", "strict", 2, 4) + "."
	topo := "0/4 nodes are available: 4 " + reasons.TopologyUnsatisfied(8, "nvlink", 4) + "."
	created := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	t0 := created.Add(10 * time.Second)

	h.at(created.Add(100 * time.Millisecond))
	h.see("Pod", conditionPod("folded", created, "1", "", time.Time{}))
	h.see("Pod", conditionPod("own", created, "1", "", time.Time{}))
	h.flush()

	// First failure of both: an Event and the condition, the same message.
	h.at(t0.Add(100 * time.Millisecond))
	h.see("Event", failedEvent("ev-f", "folded", "10", gang, t0, 1, time.Time{}))
	h.see("Event", failedEvent("ev-o1", "own", "11", gang, t0, 1, time.Time{}))
	h.at(t0.Add(200 * time.Millisecond))
	h.see("Pod", conditionPod("folded", created, "2", gang, t0))
	h.see("Pod", conditionPod("own", created, "2", gang, t0))
	h.flush()

	// Second failure, two seconds later. folded: its Event counted up with
	// the old note. own: the pod update comes first, its Event a flush later.
	h.at(t0.Add(2*time.Second + 100*time.Millisecond))
	h.see("Event", failedEvent("ev-f", "folded", "12", gang, t0, 2, t0.Add(2*time.Second)))
	h.at(t0.Add(2*time.Second + 400*time.Millisecond))
	h.see("Pod", conditionPod("folded", created, "3", topo, t0))
	h.see("Pod", conditionPod("own", created, "3", topo, t0))
	h.flush()
	h.at(t0.Add(2*time.Second + 600*time.Millisecond))
	h.see("Event", failedEvent("ev-o2", "own", "13", topo, t0.Add(2*time.Second), 1, time.Time{}))
	h.flush()

	keys := func(uid string) []string {
		t.Helper()
		as, err := st.PodAttempts(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range as {
			out = append(out, a.Key+" "+string(a.Category))
		}
		return out
	}
	if got := keys("folded"); strings.Join(got, ",") != "ev-f/1 gang_incomplete,ev-f/2 gang_incomplete" {
		t.Fatalf("folded's attempts within the grace %q; want only its Event's two", got)
	}

	// The grace over, the condition's message no Event recorded is stored.
	h.at(t0.Add(2*time.Second + 400*time.Millisecond + conditionGrace))
	h.flush()
	h.flush()
	seenTopo := t0.Add(2*time.Second + 400*time.Millisecond)
	want := []string{"ev-f/1 gang_incomplete", "ev-f/2 gang_incomplete",
		"folded/condition/" + strconv.FormatInt(seenTopo.UnixNano(), 10) + " topology"}
	if got := keys("folded"); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("folded's attempts %q; want %q", got, want)
	}
	if got := keys("own"); strings.Join(got, ",") != "ev-o1/1 gang_incomplete,ev-o2/1 topology" {
		t.Errorf("own's attempts %q; want its two Events' only", got)
	}

	iv, err := st.PodWaitIntervals(ctx, "folded")
	if err != nil {
		t.Fatal(err)
	}
	last := iv[len(iv)-1]
	if last.Category != string(schedloop.WaitTopology) || !last.Start.Equal(seenTopo) {
		t.Errorf("folded's wait ends in %s from %s; want topology from %s (intervals %+v)", last.Category, last.Start, seenTopo, iv)
	}
	for _, i := range iv[:len(iv)-1] {
		if i.Category == string(schedloop.WaitTopology) {
			t.Errorf("topology before the failure that reported it: %+v", i)
		}
	}
}

// TestConditionFirstReadDatesByTransition: a pod first read already failing
// (a re-list) dates the failure by the condition's last transition, and
// any Event carrying the message stands for it, whenever it was.
func TestConditionFirstReadDatesByTransition(t *testing.T) {
	ctx := context.Background()
	h, st := newConditionHarness(t, nil)
	msg := "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
	other := "0/4 nodes are available: 4 Insufficient cpu."
	created := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	transition := created.Add(5 * time.Second)
	h.at(created.Add(time.Hour))
	h.see("Pod", conditionPod("recorded", created, "5", msg, transition))
	h.see("Pod", conditionPod("unrecorded", created, "5", other, transition))
	// An Event much later than the transition: the message was rewritten.
	h.see("Event", failedEvent("ev-r", "recorded", "9", msg, created.Add(40*time.Minute), 1, time.Time{}))
	h.flush()
	h.at(created.Add(time.Hour + conditionGrace))
	h.flush()
	as, err := st.PodAttempts(ctx, "recorded")
	if err != nil || len(as) != 1 || as[0].Key != "ev-r/1" {
		t.Errorf("recorded's attempts %+v (err %v); want its Event's only", as, err)
	}
	as, err = st.PodAttempts(ctx, "unrecorded")
	if err != nil || len(as) != 1 || !as[0].At.Equal(transition) || as[0].Category != schedloop.WaitInsufficientCPU ||
		as[0].Result != schedloop.AttemptUnschedulable || as[0].Message != other {
		t.Errorf("unrecorded's attempts %+v (err %v); want one at the transition %s, insufficient CPU", as, err, transition)
	}
}

func TestSameFailure(t *testing.T) {
	long := "0/4 nodes are available: " + strings.Repeat("x", 2000)
	for _, c := range []struct {
		note, message string
		want          bool
	}{
		{"a", "a", true},
		{"a", "b", false},
		{long[:1020] + " ...", long, true},                   // the Event's note is shortened
		{long[:1020] + " ...", "0/4 nodes are other", false}, // a different message
		{" ...", "anything", false},
	} {
		if got := sameFailure(c.note, c.message); got != c.want {
			t.Errorf("sameFailure(%.30q, %.30q) = %v; want %v", c.note, c.message, got, c.want)
		}
	}
}

// TestConditionMatchesItsEventBeforeMapping: in an accelerated replay a
// half-second lag between a failure's Event and its condition is minutes on
// the stored axis; the two are still one failure, stored once.
func TestConditionMatchesItsEventBeforeMapping(t *testing.T) {
	ctx := context.Background()
	created := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	h, st := newConditionHarness(t, func(at time.Time) time.Time { return created.Add(at.Sub(created) * 1000) })
	first := "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
	second := "0/4 nodes are available: 4 Insufficient cpu."
	h.at(created.Add(10 * time.Millisecond))
	h.see("Pod", conditionPod("p", created, "1", "", time.Time{}))
	h.at(created.Add(time.Second + 100*time.Millisecond))
	h.see("Event", failedEvent("ev-1", "p", "7", first, created.Add(time.Second), 1, time.Time{}))
	h.see("Pod", conditionPod("p", created, "2", first, created.Add(time.Second)))
	h.flush()
	h.at(created.Add(3 * time.Second))
	h.see("Event", failedEvent("ev-2", "p", "8", second, created.Add(3*time.Second), 1, time.Time{}))
	h.at(created.Add(3*time.Second + 500*time.Millisecond))
	h.see("Pod", conditionPod("p", created, "3", second, created.Add(time.Second)))
	h.flush()
	h.at(created.Add(3*time.Second + 500*time.Millisecond + conditionGrace))
	h.flush()
	as, err := st.PodAttempts(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, a := range as {
		keys = append(keys, a.Key)
	}
	if strings.Join(keys, ",") != "ev-1/1,ev-2/1" {
		t.Errorf("attempts %q; want the two Events' only", keys)
	}
}
