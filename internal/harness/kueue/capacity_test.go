package kueue_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kueueapi "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
)

// TestKueueCapacityWaitHoldsQuotaLikeReplay: a pod outside Kueue holds one
// of the four nodes. team-a's a1 is admitted and placed; team-b's b1 is
// admitted but its two members find one free node and wait for capacity,
// holding team-b's quota all the while, so team-a's a2, which could only
// borrow team-b's quota, waits for quota though a node is free. Once the
// outside pod is gone b1 is placed. The simulator's replay behind Kueue,
// fed the same objects and the outside pod's life, admits in the same
// order, holds b1's quota through its wait for capacity (a2 stays
// unadmitted), and starts b1 when the outside pod ends, after a1.
func TestKueueCapacityWaitHoldsQuotaLikeReplay(t *testing.T) {
	e := newEnv(t)
	db, stopCollecting := e.collect()
	ctx := t.Context()
	filler, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "filler"},
		Spec:       eightGPUs("svc:1"),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.waitFor("the outside pod bound", func() bool {
		p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, "filler", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != ""
	})
	e.nextSecond()
	e.gang("a1", "team-a", 2, nil)
	e.waitRunning("a1", 2)
	e.nextSecond()
	e.gang("b1", "team-b", 2, nil)
	b1Reserved := e.waitQuotaReserved("b1 admitted", "b1", metav1.ConditionTrue)
	e.waitFailedScheduling("b1")
	if nodes, _ := e.bound("b1"); len(nodes) != 0 {
		t.Fatalf("b1 bound on %v with one node free; want it waiting for capacity", nodes)
	}
	e.nextSecond()
	e.gang("a2", "team-a", 1, nil)
	e.waitQuotaReserved("a2 pending for quota b1 holds", "a2", metav1.ConditionFalse)
	e.nextSecond()
	if err := e.c.Client.CoreV1().Pods(ns).Delete(ctx, "filler", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the outside pod gone", func() bool {
		_, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, "filler", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	fillerEnd := time.Now()
	e.waitRunning("b1", 2)
	if qr := e.condition("a2", kueueapi.WorkloadQuotaReserved); qr == nil || qr.Status != metav1.ConditionFalse {
		t.Errorf("a2's QuotaReserved %+v once b1 runs; want it still waiting for quota", qr)
	}
	a1At, b1At := boundAt(e.pods("a1")), boundAt(e.pods("b1"))
	if !a1At.Before(b1At) || b1At.Before(fillerEnd.Truncate(time.Second)) || b1At.Before(b1Reserved.LastTransitionTime.Time) {
		t.Fatalf("live: a1 bound %v, b1 admitted %v and bound %v, outside pod gone %v; want a1, then b1's admission, its wait, the pod gone, b1 bound",
			a1At, b1Reserved.LastTransitionTime, b1At, fillerEnd)
	}
	stopCollecting()
	stored, err := db.KueueWorkloads(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	liveSteps := liveOrder(stored)

	created := filler.CreationTimestamp.Time
	r := e.simulate([]outsideJob{{arrive: created, job: sim.Job{Name: ns + "/filler", Duration: fillerEnd.Sub(created),
		Members: 1, Request: scoring.Request{GPUs: 8}, Util: 1}}})
	replayed := r.steps()
	t.Logf("live:     %v", liveSteps)
	t.Logf("replayed: %v", replayed)
	if !slices.Equal(liveSteps, replayed) {
		t.Errorf("replayed admission order %v, live %v", replayed, liveSteps)
	}
	out := map[string]sim.Outcome{}
	for i, j := range r.jobs {
		out[strings.TrimPrefix(j.Name, ns+"/")] = r.res.Jobs[i]
		t.Logf("replay: %s admitted %v, %+v", j.Name, r.res.Kueue.Admitted[j.Name], r.res.Jobs[i])
	}
	a1, b1, fill := out["a1"], out["b1"], out["filler"]
	b1Admitted := r.res.Kueue.Admitted[ns+"/b1"]
	if !(a1.Start < b1.Start) || b1.Start != fill.End || !(b1Admitted < b1.Start) {
		t.Errorf("replay: a1 starts %v, b1 admitted %v, starts %v, outside pod ends %v; want the live order: a1, b1 admitted, waiting for capacity until the pod ends",
			a1.Start, b1Admitted, b1.Start, fill.End)
	}
	if at, ok := r.res.Kueue.Admitted[ns+"/a2"]; ok && at <= time.Since(r.origin) {
		t.Errorf("replay admitted a2 at %v, while live Kueue holds it for the quota b1 reserved", at)
	}
}
