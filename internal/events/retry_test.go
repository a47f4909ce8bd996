package events

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/schedloop/schedloop"
)

// flakyStore fails its first InsertAttempts and records the rest.
type flakyStore struct {
	failures int
	attempts []schedloop.SchedulingAttempt
}

func (s *flakyStore) UpsertNodes(context.Context, []schedloop.Node) error { return nil }
func (s *flakyStore) UpsertJobs(context.Context, []schedloop.Job) error   { return nil }
func (s *flakyStore) UpsertPods(context.Context, []schedloop.Pod) error   { return nil }
func (s *flakyStore) DeriveJobs(context.Context, []string) error          { return nil }
func (s *flakyStore) UpsertEvents(context.Context, []schedloop.Event) error {
	return nil
}
func (s *flakyStore) InsertAttempts(_ context.Context, a []schedloop.SchedulingAttempt) (int64, error) {
	if s.failures > 0 {
		s.failures--
		return 0, errors.New("connection reset")
	}
	s.attempts = append(s.attempts, a...)
	return int64(len(a)), nil
}

// TestRetriedWriteCountsAnUnparsedMessageOnce: a FailedScheduling message
// the parser does not know is counted once, though its write is retried, and
// its attempt is stored once the store is back.
func TestRetriedWriteCountsAnUnparsedMessageOnce(t *testing.T) {
	st := &flakyStore{failures: 2}
	parser := NewParser()
	w, err := NewWatcher(WatchOptions{Client: fake.NewClientset(), Store: st, Parser: parser})
	if err != nil {
		t.Fatal(err)
	}
	at := metav1.NewTime(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "p.1", Namespace: "ml", UID: "ev-1", ResourceVersion: "7"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "ml", UID: "pod-1"},
		Reason:         "FailedScheduling", Type: corev1.EventTypeWarning, Count: 1,
		Message: "the moon is in the wrong phase", FirstTimestamp: at, LastTimestamp: at,
	}
	w.handle("Event", ev, false)
	ctx := context.Background()
	for range 2 {
		if err := w.Flush(ctx); err == nil {
			t.Fatal("Flush succeeded against a failing store")
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(parser.unparsed); got != 1 {
		t.Errorf("unparsed messages counted %v times over three writes; want 1", got)
	}
	if len(st.attempts) != 1 || st.attempts[0].Key != "ev-1/1" || st.attempts[0].Category != schedloop.WaitOther {
		t.Errorf("stored attempts %+v; want one, ev-1/1, category other", st.attempts)
	}
	if err := w.Flush(ctx); err != nil || len(st.attempts) != 1 {
		t.Errorf("a flush with nothing new stored %d attempts (err %v); want still 1", len(st.attempts), err)
	}
}
