package kueue

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kueueapi "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/workload"
	workloadfinish "sigs.k8s.io/kueue/pkg/workload/finish"
	workloadpatching "sigs.k8s.io/kueue/pkg/workload/patching"

	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
)

// A gang reaches Kueue the way Kueue's pod-group integration brings plain
// pods: a Workload with one pod set for all members, and the members held by
// Kueue's admission scheduling gate until the Workload is admitted. That
// integration (sigs.k8s.io/kueue/pkg/controller/jobs/pod, through
// pkg/controller/jobframework) does not compile against Kubernetes 1.37: the
// framework imports the Kubeflow trainer API, whose generated OpenAPI names
// corev1.PodStatusResult, gone from k8s.io/api v0.37. So the few steps it
// takes for a gang are taken here, with Kueue's own workload helpers: on
// admission, ungate the members and pin them to the assigned flavour's node
// labels; on eviction, delete them, recreate them gated and release the
// quota reservation as the job reconciler does; when every member has
// succeeded, finish the Workload.
const (
	// AdmissionGate is the scheduling gate Kueue's pod integration puts on
	// the pods it manages (pkg/controller/jobs/pod/constants).
	AdmissionGate = "kueue.x-k8s.io/admission"
	// LabelGang marks the Workloads this package created and manages.
	LabelGang = "schedloop.io/kueue-gang"
	// PodSetName names a gang's one pod set.
	PodSetName = "main"
)

// Gang is a gang to submit through Kueue.
type Gang struct {
	Namespace, Name string
	// Queue is the LocalQueue (the kueue.x-k8s.io/queue-name label).
	Queue   string
	Members int32
	// Pod is every member's pod; its labels and annotations are kept and the
	// gang's own added.
	Pod corev1.Pod
}

// Submit creates the gang's PodGroup, its Workload and its gated members.
func (k *Kueue) Submit(ctx context.Context, g Gang) error {
	pg := podgroup.New(g.Namespace, g.Name, g.Members)
	obj, err := podgroup.ToUnstructured(pg)
	if err != nil {
		return err
	}
	if err := k.Client.Create(ctx, obj); err != nil {
		return fmt.Errorf("create podgroup %s/%s: %w", g.Namespace, g.Name, err)
	}
	tmpl := memberTemplate(g)
	wl := &kueueapi.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: g.Namespace, Name: g.Name, Labels: map[string]string{LabelGang: "true"}},
		Spec: kueueapi.WorkloadSpec{
			QueueName: kueueapi.LocalQueueName(g.Queue),
			PodSets: []kueueapi.PodSet{{
				Name:  PodSetName,
				Count: g.Members,
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Labels, Annotations: tmpl.Annotations},
					Spec:       tmpl.Spec,
				},
			}},
		},
	}
	if err := k.Client.Create(ctx, wl); err != nil {
		return fmt.Errorf("create workload %s/%s: %w", g.Namespace, g.Name, err)
	}
	for range g.Members {
		if err := k.Client.Create(ctx, gatedMember(tmpl, g.Name)); err != nil {
			return fmt.Errorf("create member of %s/%s: %w", g.Namespace, g.Name, err)
		}
	}
	return nil
}

// memberTemplate is the pod every member is made from: in the gang's
// PodGroup and LocalQueue, in the gang's namespace.
func memberTemplate(g Gang) *corev1.Pod {
	p := g.Pod.DeepCopy()
	p.Namespace = g.Namespace
	p.Labels = maps.Clone(p.Labels)
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[podspec.LabelPodGroup] = g.Name
	p.Labels[podspec.LabelQueue] = g.Queue
	return p
}

func gatedMember(tmpl *corev1.Pod, gang string) *corev1.Pod {
	p := tmpl.DeepCopy()
	p.Name, p.GenerateName, p.ResourceVersion, p.UID = "", gang+"-", "", ""
	p.Spec.NodeName = ""
	p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: AdmissionGate})
	return p
}

type gangReconciler struct {
	client client.Client
	// live reads the apiserver itself, not the manager's cache: see evict.
	live  client.Reader
	clock clock.Clock
}

func setupGangs(mgr ctrl.Manager) error {
	r := &gangReconciler{client: mgr.GetClient(), live: mgr.GetAPIReader(), clock: clock.RealClock{}}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("schedloop-kueue-gang").
		For(&kueueapi.Workload{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			name := o.GetLabels()[podspec.LabelPodGroup]
			if name == "" || o.GetLabels()[podspec.LabelQueue] == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("kueue gang controller: %w", err)
	}
	return nil
}

func (r *gangReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var wl kueueapi.Workload
	if err := r.client.Get(ctx, req.NamespacedName, &wl); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if wl.Labels[LabelGang] != "true" || workloadfinish.IsFinished(&wl) {
		return reconcile.Result{}, nil
	}
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(wl.Namespace),
		client.MatchingLabels{podspec.LabelPodGroup: wl.Name}); err != nil {
		return reconcile.Result{}, err
	}
	live := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })

	if ev := apimeta.FindStatusCondition(wl.Status.Conditions, kueueapi.WorkloadEvicted); ev != nil &&
		ev.Status == metav1.ConditionTrue && workload.HasQuotaReservation(&wl) {
		return reconcile.Result{}, r.evict(ctx, &wl, ev)
	}
	succeeded := 0
	for _, p := range live {
		if p.Status.Phase == corev1.PodSucceeded {
			succeeded++
		}
	}
	if count := wl.Spec.PodSets[0].Count; succeeded >= int(count) {
		return reconcile.Result{}, workloadfinish.Finish(ctx, r.client, &wl,
			kueueapi.WorkloadFinishedReasonSucceeded, fmt.Sprintf("%d of %d members succeeded", succeeded, count), r.clock)
	}
	if !workload.IsAdmitted(&wl) {
		return reconcile.Result{}, nil
	}
	selector, err := r.flavorNodeLabels(ctx, &wl)
	if err != nil {
		return reconcile.Result{}, err
	}
	for i := range live {
		if err := r.ungate(ctx, &live[i], selector); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{}, nil
}

// evict stops the gang and gives its quota back, as Kueue's job reconciler
// does for an evicted job: the members that were let in go, gated ones take
// their place, and the reservation is released with the eviction's message,
// requeued when a preemption caused it.
//
// It may run twice for one eviction: the pod changes it makes requeue the
// Workload, and the next pass can read it from the cache before the
// release below shows there. So the members are listed from the apiserver,
// not the cache (which may not hold the gated members just made yet), and
// only the gated members missing are made: a second pass finds the gang
// already stopped and makes none, where it made a second set.
func (r *gangReconciler) evict(ctx context.Context, wl *kueueapi.Workload, ev *metav1.Condition) error {
	var pods corev1.PodList
	if err := r.live.List(ctx, &pods, client.InNamespace(wl.Namespace),
		client.MatchingLabels{podspec.LabelPodGroup: wl.Name}); err != nil {
		return fmt.Errorf("list members of %s/%s: %w", wl.Namespace, wl.Name, err)
	}
	gated := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		if slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == AdmissionGate }) {
			gated++
			continue
		}
		if err := r.client.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("evict %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	tmpl := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: wl.Namespace,
			Labels: wl.Spec.PodSets[0].Template.Labels, Annotations: wl.Spec.PodSets[0].Template.Annotations},
		Spec: wl.Spec.PodSets[0].Template.Spec,
	}
	for range int(wl.Spec.PodSets[0].Count) - gated {
		if err := r.client.Create(ctx, gatedMember(tmpl, wl.Name)); err != nil {
			return fmt.Errorf("recreate member of %s/%s: %w", wl.Namespace, wl.Name, err)
		}
	}
	return workloadpatching.PatchAdmissionStatus(ctx, r.client, wl, r.clock, func(wl *kueueapi.Workload) (bool, error) {
		requeue := ev.Reason == kueueapi.WorkloadEvictedByPreemption
		updated := workload.SetRequeuedCondition(wl, ev.Reason, ev.Message, requeue)
		if workload.UnsetQuotaReservationWithCondition(wl, kueueapi.WorkloadQuotaReservedReasonPendingEvaluation, ev.Message, r.clock.Now()) {
			updated = true
		}
		return updated, nil
	})
}

// flavorNodeLabels are the node labels of the flavours assigned to the
// gang's pod set, which its members must land on.
func (r *gangReconciler) flavorNodeLabels(ctx context.Context, wl *kueueapi.Workload) (map[string]string, error) {
	out := map[string]string{}
	if wl.Status.Admission == nil {
		return out, nil
	}
	for _, psa := range wl.Status.Admission.PodSetAssignments {
		for _, name := range psa.Flavors {
			var rf kueueapi.ResourceFlavor
			if err := r.client.Get(ctx, types.NamespacedName{Name: string(name)}, &rf); err != nil {
				return nil, fmt.Errorf("flavor %s of workload %s/%s: %w", name, wl.Namespace, wl.Name, err)
			}
			maps.Copy(out, rf.Spec.NodeLabels)
		}
	}
	return out, nil
}

// ungate lets an admitted member be scheduled, pinned to its flavour's
// nodes (a gated pod's node selector may still be added to).
func (r *gangReconciler) ungate(ctx context.Context, p *corev1.Pod, selector map[string]string) error {
	i := slices.IndexFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == AdmissionGate })
	if i < 0 {
		return nil
	}
	patched := p.DeepCopy()
	patched.Spec.SchedulingGates = slices.Delete(patched.Spec.SchedulingGates, i, i+1)
	if len(selector) > 0 {
		if patched.Spec.NodeSelector == nil {
			patched.Spec.NodeSelector = map[string]string{}
		}
		maps.Copy(patched.Spec.NodeSelector, selector)
	}
	if err := r.client.Patch(ctx, patched, client.MergeFrom(p)); err != nil {
		return fmt.Errorf("ungate %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}
