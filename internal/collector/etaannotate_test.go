package collector

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/etaserve"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// On a real apiserver: the estimate is written onto the waiting pod; an
// estimate that says the same again patches nothing; one that changes
// (the job it waits for ended) patches it again; and a rate limit with no
// room patches nothing.
func TestAnnotatorPatchesOnlyMaterialChanges(t *testing.T) {
	ctx := context.Background()
	c := harness.NewForTest(t, harness.Options{})
	st := storetest.New(t)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	start := now.Add(-20 * time.Minute)
	pod, err := c.Client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "wait"},
		Spec: corev1.PodSpec{SchedulerName: "schedloop", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(pod.UID)
	if err := st.UpsertNodes(ctx, []schedloop.Node{{Name: "n1", GPUModel: "H100", GPUCount: 8, Ready: true, FirstSeen: start, LastSeen: now}}); err != nil {
		t.Fatal(err)
	}
	job := func(uid, name string, priority int32, created time.Time) schedloop.Job {
		return schedloop.Job{UID: uid, Namespace: "default", Name: name, Kind: schedloop.JobKindPod, MinMember: 1, GPUsPerMember: 8, Priority: priority, Created: created, Phase: schedloop.PhasePending}
	}
	running := job("run", "run", 0, start)
	running.Admitted, running.Started, running.FirstScheduled, running.Phase = start, start, start, schedloop.PhaseRunning
	if err := st.UpsertJobs(ctx, []schedloop.Job{running, job(uid, "wait", 0, now.Add(-time.Minute))}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertPods(ctx, []schedloop.Pod{
		{UID: "p-run", Namespace: "default", Name: "run", JobUID: "run", GPUs: 8, Node: "n1", Created: start, Scheduled: start, Started: start, Phase: schedloop.PhaseRunning},
		{UID: uid, Namespace: "default", Name: "wait", JobUID: uid, GPUs: 8, Created: now.Add(-time.Minute), Phase: schedloop.PhasePending},
	}); err != nil {
		t.Fatal(err)
	}
	// Each estimate is stored under the instant it was made: a second apart.
	clock := now
	e := &Estimator{Service: &etaserve.Service{Store: st, Now: func() time.Time { return clock }, Seed: 1}, Store: st, Annotate: NewAnnotator(c.Client, st, 100)}
	read := func() (string, etaMark) {
		t.Helper()
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, "wait", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var m etaMark
		if v, ok := p.Annotations[podspec.AnnotationETA]; ok {
			if err := json.Unmarshal([]byte(v), &m); err != nil {
				t.Fatalf("annotation %q: %v", v, err)
			}
		}
		return p.ResourceVersion, m
	}
	if err := e.Once(ctx); err != nil {
		t.Fatal(err)
	}
	rv, first := read()
	if first.State != "starts" || first.P50 == nil || !first.P50.After(now) || !first.Made.Equal(now) {
		t.Fatalf("annotation %+v: want the job expected to start after %v, made then", first, now)
	}
	clock = clock.Add(time.Second)
	if err := e.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if again, _ := read(); again != rv {
		t.Errorf("the same estimate patched the pod again (resource version %s -> %s)", rv, again)
	}
	// The running job ends: the waiting one starts at once.
	running.Finished, running.Phase = now, schedloop.PhaseSucceeded
	if err := st.UpsertJobs(ctx, []schedloop.Job{running}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertPods(ctx, []schedloop.Pod{{UID: "p-run", Namespace: "default", Name: "run", JobUID: "run", GPUs: 8, Node: "n1", Created: start, Scheduled: start, Started: start, Finished: now, Phase: schedloop.PhaseSucceeded}}); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Second)
	if err := e.Once(ctx); err != nil {
		t.Fatal(err)
	}
	rv2, moved := read()
	if rv2 == rv || moved.State != "starts" || moved.P50 == nil || !moved.P50.Equal(clock) {
		t.Errorf("after the running job ended: annotation %+v, resource version %s (was %s): want it patched to start at once, %v", moved, rv2, rv, clock)
	}
	limited := &Annotator{Client: c.Client, Store: st, Limiter: flowcontrol.NewFakeNeverRateLimiter()}
	a, err := e.Service.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := limited.Annotate(ctx, a, now.Add(-time.Hour)); n != 0 || err != nil {
		t.Errorf("with no room in the rate limit: %d patched, %v; want none", n, err)
	}
}
