package events

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/harness"
)

// A "Preempted" Event whose note is schedloop's cause is stored as an
// eviction with that cause; kube-scheduler's own note (the preemptor by
// UID) is kept as an event only.
func TestPreemptionStoredWithItsCause(t *testing.T) {
	ctx := context.Background()
	c := harness.NewForTest(t, harness.Options{})
	w, st := NewTestWatcher(t, c, WatchOptions{Dynamic: c.Dynamic})
	at := metav1.NewTime(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	ours := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "young-0.1", Namespace: "ml", UID: "ev-1", ResourceVersion: "7"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "young-0", Namespace: "ml", UID: "pod-young-0"},
		Reason:         "Preempted", Type: corev1.EventTypeNormal, Count: 1, FirstTimestamp: at, LastTimestamp: at,
		Message: "Preempted by pod ml/urgent (priority 1000) on node w00; job ml/young loses 0.0167 GPU-hours",
	}
	stock := ours.DeepCopy()
	stock.UID, stock.Name, stock.InvolvedObject.UID = "ev-2", "other.1", "pod-other"
	stock.Message = "Preempted by pod 82b8c712-815c-4664-8fec-6f55cdcd4eb4 on node w01"
	w.handle("Event", ours, false)
	w.handle("Event", stock, false)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A re-list of the same event adds nothing.
	w.handle("Event", ours, false)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := st.Preemptions(ctx, []string{"pod-young-0", "pod-other"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := schedloop.Preemption{VictimUID: "pod-young-0", Namespace: "ml", VictimPod: "young-0", VictimJob: "ml/young",
		Preemptor: "ml/urgent", PreemptorPriority: 1000, Node: "w00", GPUHours: 0.0167, At: at.Time}
	if len(got) != 1 || !got[0].At.Equal(want.At) {
		t.Fatalf("preemptions %+v, want one: %+v", got, want)
	}
	got[0].At = want.At
	if got[0] != want {
		t.Errorf("preemption %+v, want %+v", got[0], want)
	}
	for _, q := range [][3][]string{{nil, {"ml/young"}, nil}, {nil, nil, {"ml/urgent"}}} {
		if ps, err := st.Preemptions(ctx, q[0], q[1], q[2]); err != nil || len(ps) != 1 {
			t.Errorf("preemptions by job or preemptor %v: %d, %v; want 1", q, len(ps), err)
		}
	}
}
