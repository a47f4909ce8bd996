package events

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop/internal/harness"
)

// A flush that stored a pod's creation, binding or end says so
// (WatchOptions.PodsChanged); one that stored only an update of a pod (a
// label) does not, and neither does a flush with nothing to store.
func TestPodsChangedOnLifecycleOnly(t *testing.T) {
	ctx := context.Background()
	c := harness.NewForTest(t, harness.Options{})
	calls := 0
	w, _ := NewTestWatcher(t, c, WatchOptions{Dynamic: c.Dynamic, PodsChanged: func() { calls++ }})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ml", UID: "pod-1", CreationTimestamp: metav1.Now()},
		Spec: corev1.PodSpec{SchedulerName: "schedloop"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	step := func(what string, change func(p *corev1.Pod), want int) {
		t.Helper()
		if change != nil {
			pod = pod.DeepCopy()
			change(pod)
			w.handle("Pod", pod, false)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if calls != want {
			t.Errorf("after %s: %d calls, want %d", what, calls, want)
		}
	}
	step("created", func(*corev1.Pod) {}, 1)
	step("labelled", func(p *corev1.Pod) { p.Labels = map[string]string{"team": "a"} }, 1)
	step("nothing", nil, 1)
	step("bound", func(p *corev1.Pod) { p.Spec.NodeName = "n1" }, 2)
	step("ended", func(p *corev1.Pod) {
		p.Status.Phase, p.Status.StartTime = corev1.PodSucceeded, &metav1.Time{Time: p.CreationTimestamp.Time}
	}, 3)
}
