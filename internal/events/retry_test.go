package events

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/harness"
)

// TestRetriedWriteCountsAnUnparsedMessageOnce: a FailedScheduling message
// the parser does not know is counted once, though its write is retried, and
// its attempt is stored once the database takes writes again. The failure is
// a real one: the attempts table is renamed away for two flushes.
func TestRetriedWriteCountsAnUnparsedMessageOnce(t *testing.T) {
	ctx := context.Background()
	c := harness.NewForTest(t, harness.Options{})
	parser := NewParser()
	w, st := NewTestWatcher(t, c, WatchOptions{Dynamic: c.Dynamic, Parser: parser})
	at := metav1.NewTime(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "p.1", Namespace: "ml", UID: "ev-1", ResourceVersion: "7"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "ml", UID: "pod-1"},
		Reason:         "FailedScheduling", Type: corev1.EventTypeWarning, Count: 1,
		Message: "the moon is in the wrong phase", FirstTimestamp: at, LastTimestamp: at,
	}
	w.handle("Event", ev, false)
	exec := func(sql string) {
		t.Helper()
		if _, err := st.Pool().Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(`ALTER TABLE scheduling_attempts RENAME TO scheduling_attempts_away`)
	for range 2 {
		if err := w.Flush(ctx); err == nil {
			t.Fatal("Flush succeeded while the attempts table was gone")
		}
	}
	exec(`ALTER TABLE scheduling_attempts_away RENAME TO scheduling_attempts`)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(parser.unparsed); got != 1 {
		t.Errorf("unparsed messages counted %v times over three writes; want 1", got)
	}
	attempts, err := st.PodAttempts(ctx, "pod-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 1 || attempts[0].Key != "ev-1/1" || attempts[0].Category != schedloop.WaitOther {
		t.Errorf("stored attempts %+v; want one, ev-1/1, category other", attempts)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if again, err := st.PodAttempts(ctx, "pod-1"); err != nil || len(again) != 1 {
		t.Errorf("a flush with nothing new left %d attempts (err %v); want still 1", len(again), err)
	}
}
