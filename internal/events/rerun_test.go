package events

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/podgroup"
)

// A pod deleted by an eviction is stored as evicted and its job goes on:
// the pod a Job controller makes in its place (the Job's labels) joins the
// same job, which ends with it. A gang whose members were all evicted
// before any was bound ends, Deleted, when its PodGroup is deleted, and has
// no JCT.
func TestEvictedMembersLeaveTheirJobOpen(t *testing.T) {
	ctx := context.Background()
	c := harness.NewForTest(t, harness.Options{})
	w, st := NewTestWatcher(t, c, WatchOptions{Dynamic: c.Dynamic})
	flush := func() {
		t.Helper()
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	job := func(uid string) schedloop.Job {
		t.Helper()
		j, err := st.GetJob(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	t0 := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	evicted := []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonPreemptionByScheduler}}
	pod := func(name, uid string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID(uid), Labels: labels, CreationTimestamp: t0}}
	}

	jobLabels := map[string]string{batchv1.ControllerUidLabel: "job-uid", batchv1.JobNameLabel: "urgent"}
	first := pod("urgent-abc", "p1", jobLabels)
	first.Spec.NodeName = "n1"
	first.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &t0, Conditions: append([]corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0}}, evicted...)}
	w.handle("Pod", first, false)
	w.handle("Pod", first, true)
	flush()
	if j := job("job-uid"); !j.Finished.IsZero() || j.Kind != schedloop.JobKindPod || j.Name != "urgent" {
		t.Errorf("Job's pod evicted: job %s %q finished %v; want the Job's lone job, open", j.Kind, j.Name, j.Finished)
	}
	if p, err := st.GetPod(ctx, "p1"); err != nil || !p.Evicted || p.Phase != schedloop.PhaseDeleted || p.JobUID != "job-uid" {
		t.Errorf("evicted pod stored as %+v (%v)", p, err)
	}
	second := pod("urgent-def", "p2", jobLabels)
	second.CreationTimestamp = metav1.NewTime(t0.Add(time.Minute))
	second.Spec.NodeName = "n1"
	second.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, StartTime: &t0}
	w.handle("Pod", second, false)
	flush()
	if j := job("job-uid"); j.Finished.IsZero() || j.Phase != schedloop.PhaseSucceeded || !j.Created.Equal(t0.Time) || !j.FirstScheduled.Equal(t0.Time) {
		t.Errorf("the replacement ended: job %s created %v first bound %v finished %v; want Succeeded, created and bound %v",
			j.Phase, j.Created, j.FirstScheduled, j.Finished, t0.Time)
	}

	pg, err := podgroup.ToUnstructured(podgroup.New("ml", "train", 2))
	if err != nil {
		t.Fatal(err)
	}
	pg.SetUID("g-uid")
	pg.SetCreationTimestamp(t0)
	w.handle("PodGroup", pg, false)
	for i, uid := range []string{"m0", "m1"} {
		m := pod("train-"+string(rune('0'+i)), uid, map[string]string{podgroup.LabelPodGroup: "train"})
		m.Status.Conditions = evicted
		w.handle("Pod", m, false)
		w.handle("Pod", m, true)
	}
	flush()
	if j := job("g-uid"); !j.Finished.IsZero() || j.Phase != schedloop.PhasePending {
		t.Errorf("gang evicted unbound, its PodGroup there: %s finished %v; want Pending, open", j.Phase, j.Finished)
	}
	w.handle("PodGroup", pg, true)
	flush()
	j := job("g-uid")
	if j.Phase != schedloop.PhaseDeleted || j.Deleted.IsZero() || !j.Finished.Equal(j.Deleted) || !j.FirstScheduled.IsZero() {
		t.Errorf("gang's PodGroup deleted: %s finished %v deleted %v first bound %v; want Deleted when its group went, never bound",
			j.Phase, j.Finished, j.Deleted, j.FirstScheduled)
	}
	jcts, err := st.FinishedJobJCT(ctx, t0.Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(jcts) != 1 || jcts[0].UID != "job-uid" {
		t.Errorf("JCTs %+v, want the lone job's alone: a gang never bound has none", jcts)
	}
}
