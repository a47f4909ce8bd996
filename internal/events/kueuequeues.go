package events

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	kueueapi "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/schedloop/schedloop"
)

// KueueQueueStore is what the watcher writes ClusterQueues to; *store.Store
// is one. A Store without it gets no ClusterQueues.
type KueueQueueStore interface {
	UpsertKueueClusterQueues(ctx context.Context, qs []schedloop.KueueClusterQueue) error
	DeleteKueueClusterQueue(ctx context.Context, name string) error
}

// KueueClusterQueueGVR is Kueue's ClusterQueue resource, watched with its
// Workloads.
var KueueClusterQueueGVR = kueueapi.SchemeGroupVersion.WithResource("clusterqueues")

const kindKueueClusterQueue = "KueueClusterQueue"

// KueueClusterQueueOf reads a ClusterQueue's spec and the reservation and
// borrowing its status reports, quantities in thousandths. It is the one
// reading of a ClusterQueue: the collector stores it, replays start from it.
func KueueClusterQueueOf(cq kueueapi.ClusterQueue, observed time.Time) schedloop.KueueClusterQueue {
	out := schedloop.KueueClusterQueue{Name: cq.Name, Cohort: string(cq.Spec.CohortName),
		QueueingStrategy: string(cq.Spec.QueueingStrategy), ObservedAt: observed}
	if fs := cq.Spec.FairSharing; fs != nil && fs.Weight != nil {
		out.FairWeight = fs.Weight.AsApproximateFloat64()
	}
	if p := cq.Spec.Preemption; p != nil {
		out.ReclaimWithinCohort = string(p.ReclaimWithinCohort)
		out.WithinClusterQueue = string(p.WithinClusterQueue)
		if p.BorrowWithinCohort != nil {
			out.BorrowWithinCohort = string(p.BorrowWithinCohort.Policy)
		}
	}
	if ff := cq.Spec.FlavorFungibility; ff != nil {
		out.WhenCanBorrow, out.WhenCanPreempt = string(ff.WhenCanBorrow), string(ff.WhenCanPreempt)
		if ff.Preference != nil {
			out.FungibilityPreference = string(*ff.Preference)
		}
	}
	type key struct{ flavor, resource string }
	status := map[key][2]int64{}
	for _, f := range cq.Status.FlavorsReservation {
		for _, r := range f.Resources {
			status[key{string(f.Name), string(r.Name)}] = [2]int64{r.Total.MilliValue(), r.Borrowed.MilliValue()}
		}
	}
	for _, rg := range cq.Spec.ResourceGroups {
		for _, f := range rg.Flavors {
			for _, r := range f.Resources {
				q := schedloop.KueueQuota{Flavor: string(f.Name), Resource: string(r.Name), Nominal: r.NominalQuota.MilliValue()}
				if r.BorrowingLimit != nil {
					q.BorrowingLimit = new(r.BorrowingLimit.MilliValue())
				}
				if r.LendingLimit != nil {
					q.LendingLimit = new(r.LendingLimit.MilliValue())
				}
				s := status[key{q.Flavor, q.Resource}]
				q.Reserved, q.Borrowed = s[0], s[1]
				out.Quotas = append(out.Quotas, q)
			}
		}
	}
	return out
}

// handleKueueQueue records a ClusterQueue, or its deletion, as a pending
// change.
func (w *Watcher) handleKueueQueue(u *unstructured.Unstructured, deleted bool, now time.Time) {
	var cq kueueapi.ClusterQueue
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cq); err != nil {
		w.log.Warn("kueue cluster queue not read", "name", u.GetName(), "err", err)
		return
	}
	if deleted {
		delete(w.kueueQueues, cq.Name)
		w.kueueQueuesGone[cq.Name] = true
		return
	}
	delete(w.kueueQueuesGone, cq.Name)
	w.kueueQueues[cq.Name] = KueueClusterQueueOf(cq, now)
}

// flushKueueQueues writes the pending ClusterQueues and deletions; on error
// they stay pending unless a newer change came meanwhile.
func (w *Watcher) flushKueueQueues(ctx context.Context) error {
	ks, ok := w.opts.Store.(KueueQueueStore)
	w.mu.Lock()
	pending, gone := w.kueueQueues, w.kueueQueuesGone
	w.kueueQueues, w.kueueQueuesGone = map[string]schedloop.KueueClusterQueue{}, map[string]bool{}
	w.mu.Unlock()
	if !ok || len(pending)+len(gone) == 0 {
		return nil
	}
	err := func() error {
		rows := make([]schedloop.KueueClusterQueue, 0, len(pending))
		for _, q := range pending {
			rows = append(rows, q)
		}
		if err := ks.UpsertKueueClusterQueues(ctx, rows); err != nil {
			return err
		}
		for name := range gone {
			if err := ks.DeleteKueueClusterQueue(ctx, name); err != nil {
				return fmt.Errorf("kueue cluster queue %s deleted: %w", name, err)
			}
			delete(gone, name)
		}
		return nil
	}()
	if err != nil {
		w.mu.Lock()
		for name, q := range pending {
			if _, newer := w.kueueQueues[name]; !newer && !w.kueueQueuesGone[name] {
				w.kueueQueues[name] = q
			}
		}
		for name := range gone {
			if _, newer := w.kueueQueues[name]; !newer {
				w.kueueQueuesGone[name] = true
			}
		}
		w.mu.Unlock()
	}
	return err
}
