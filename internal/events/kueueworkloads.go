package events

import (
	"context"
	"fmt"
	"slices"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	kueueapi "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/schedloop/schedloop"
)

// KueueStore is what the watcher writes Kueue Workloads to; *store.Store is
// one. A Store without it gets no Workloads.
type KueueStore interface {
	UpsertKueueWorkloads(ctx context.Context, ws []schedloop.KueueWorkload) error
}

// KueueWorkloadGVR is Kueue's Workload resource, watched where served.
var KueueWorkloadGVR = kueueapi.SchemeGroupVersion.WithResource("workloads")

const kindKueueWorkload = "KueueWorkload"

// kueueConditionTypes are the Workload conditions kept in the history: the
// admission's and the eviction's. Others (PodsReady, Requeued) say nothing
// about why the job waited.
var kueueConditionTypes = []string{
	kueueapi.WorkloadQuotaReserved, kueueapi.WorkloadAdmitted, kueueapi.WorkloadEvicted,
	kueueapi.WorkloadPreempted, kueueapi.WorkloadFinished,
}

// kueueServed reports whether the apiserver serves Kueue's Workloads.
func (w *Watcher) kueueServed() bool {
	res, err := w.opts.Client.Discovery().ServerResourcesForGroupVersion(KueueWorkloadGVR.GroupVersion().String())
	if err != nil {
		return false
	}
	for _, r := range res.APIResources {
		if r.Name == KueueWorkloadGVR.Resource {
			return true
		}
	}
	return false
}

// toKueueWorkload reads a Workload as the dynamic informer holds it.
func (c clock) toKueueWorkload(u *unstructured.Unstructured) (schedloop.KueueWorkload, error) {
	var wl kueueapi.Workload
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &wl); err != nil {
		return schedloop.KueueWorkload{}, fmt.Errorf("kueue workload %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	out := schedloop.KueueWorkload{
		UID: string(wl.UID), Namespace: wl.Namespace, Name: wl.Name,
		LocalQueue: string(wl.Spec.QueueName), CreatedAt: c.mapTime(wl.CreationTimestamp.Time),
	}
	if a := wl.Status.Admission; a != nil {
		out.ClusterQueue = string(a.ClusterQueue)
		out.Flavors = map[string]string{}
		for _, psa := range a.PodSetAssignments {
			for r, f := range psa.Flavors {
				out.Flavors[string(r)] = string(f)
			}
		}
	}
	for _, t := range kueueConditionTypes {
		cond := apimeta.FindStatusCondition(wl.Status.Conditions, t)
		if cond == nil || cond.LastTransitionTime.IsZero() {
			continue
		}
		f, _ := ParseWorkloadCondition(cond.Type, string(cond.Status), cond.Reason, cond.Message)
		out.Conditions = append(out.Conditions, schedloop.KueueCondition{
			Type: cond.Type, Status: string(cond.Status), Reason: cond.Reason, Message: cond.Message,
			At: c.mapTime(cond.LastTransitionTime.Time), Category: f.Category,
		})
	}
	return out, nil
}

// handleKueue records a Workload as a pending change. A deleted Workload's
// history stays stored.
func (w *Watcher) handleKueue(u *unstructured.Unstructured, deleted bool) {
	if deleted {
		return
	}
	wl, err := w.clock.toKueueWorkload(u)
	if err != nil {
		w.log.Warn("kueue workload not read", "err", err)
		return
	}
	// Every state seen between two flushes is kept: a workload admitted and
	// preempted within one flush interval keeps both in its history.
	if prev, ok := w.kueue[wl.UID]; ok {
		for _, c := range prev.Conditions {
			if !slices.ContainsFunc(wl.Conditions, func(n schedloop.KueueCondition) bool {
				return n.Type == c.Type && n.Status == c.Status && n.Reason == c.Reason && n.At.Equal(c.At)
			}) {
				wl.Conditions = append(wl.Conditions, c)
			}
		}
	}
	w.kueue[wl.UID] = wl
}

// flushKueue writes the pending Workloads; on error they stay pending.
func (w *Watcher) flushKueue(ctx context.Context) error {
	ks, ok := w.opts.Store.(KueueStore)
	w.mu.Lock()
	pending := w.kueue
	w.kueue = map[string]schedloop.KueueWorkload{}
	w.mu.Unlock()
	if len(pending) == 0 || !ok {
		return nil
	}
	rows := make([]schedloop.KueueWorkload, 0, len(pending))
	for _, wl := range pending {
		rows = append(rows, wl)
	}
	if err := ks.UpsertKueueWorkloads(ctx, rows); err != nil {
		w.mu.Lock()
		for uid, wl := range pending {
			if _, newer := w.kueue[uid]; !newer {
				w.kueue[uid] = wl
			}
		}
		w.mu.Unlock()
		return err
	}
	return nil
}
