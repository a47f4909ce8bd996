package reservation_test

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/schedplugins/reservation"
	"github.com/schedloop/schedloop/internal/scoring"
)

// jobs orders jobs by name (all arrive at once) and predicts an hour for
// every run.
type jobs struct{}

func (jobs) Job(pod *v1.Pod, _ time.Time) (scoring.QueueKey, time.Duration) {
	return scoring.QueueKey{Name: pod.Name}, time.Hour
}

func (jobs) RunTime(*v1.Pod) time.Duration { return time.Hour }

func pod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name)}}
}

// The book plans the standing reservation again, at a later instant, when
// the cluster's state as the plan reads it has changed, and only then: a
// plan is keyed on everything it reads (State), not on the highest node
// generation, which a pod-group cycle's trial members, assumed in the
// snapshot and taken back, leave as it was.
func TestBookReplansWhenTheStateItPlannedOnChanges(t *testing.T) {
	holder := profilewatch.NewHolder()
	if _, err := holder.Apply([]byte("apiVersion: schedloop.io/v1\nkind: SchedulingProfile\nname: r\nweights: {bestfit: 1}\nreservation: {enabled: true}\n")); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	book := reservation.New(holder, func() time.Time { return now })
	book.Use(jobs{}, nil, nil)

	plans := 0
	plan := func(*v1.Pod, time.Time) ([]string, time.Time, time.Time, bool) {
		plans++
		return []string{"n1"}, now.Add(time.Hour), time.Time{}, true
	}
	state := uint64(1)
	cluster := func() uint64 { return state }

	book.Failed(pod("a-head"), cluster, plan)
	if book.Current() == nil || plans != 1 {
		t.Fatalf("the head job's failure planned %d times, reservation %v; want one plan", plans, book.Current())
	}
	steps := []struct {
		what    string
		later   bool
		state   uint64
		replans bool
	}{
		{"same instant, state changed", false, 2, false},
		{"later, state as planned on", true, 1, false},
		{"later, state changed (a trial member assumed at the same generation)", true, 2, true},
		{"later again, state as last planned on", true, 2, false},
		{"later, the trial taken back", true, 1, true},
	}
	for _, s := range steps {
		if s.later {
			now = now.Add(time.Second)
		}
		state = s.state
		before := plans
		if r := book.For(pod("b-later"), cluster, plan); r == nil {
			t.Fatalf("%s: no restriction on a job behind the holder", s.what)
		}
		if got := plans > before; got != s.replans {
			t.Fatalf("%s: planned again %t, want %t", s.what, got, s.replans)
		}
	}
}
