package podgroup

import (
	"context"
	"fmt"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// API names the API a gang is declared with.
type API string

const (
	// APIPodGroup is the scheduler-plugins PodGroup CRD
	// (scheduling.x-k8s.io/v1alpha1): pods carry LabelPodGroup.
	APIPodGroup API = "podgroup"
	// APIWorkload is the Kubernetes Workload API (scheduling.k8s.io/v1beta1,
	// feature GenericWorkload): a Workload holds pod group templates, a
	// PodGroup made from one is the running gang, and pods name it in
	// spec.schedulingGroup.podGroupName.
	APIWorkload API = "workload"
)

// APIs are the accepted values of a -gang-api flag.
var APIs = []API{APIWorkload, APIPodGroup}

// ParseAPI reads a -gang-api flag value; the error names the flag's
// accepted values.
func ParseAPI(s string) (API, error) {
	for _, a := range APIs {
		if string(a) == s {
			return a, nil
		}
	}
	return "", fmt.Errorf("gang API %q: want %q (Kubernetes Workload API, scheduling.k8s.io/v1beta1) or %q (scheduler-plugins PodGroup CRD, %s/%s)",
		s, APIWorkload, APIPodGroup, Group, Version)
}

// WorkloadGroupVersion is the Workload API's group/version in Kubernetes 1.37.
const WorkloadGroupVersion = "scheduling.k8s.io/v1beta1"

// FromWorkload reads a Workload API PodGroup as the gang schedloop admits:
// gang.minCount is its minMember. The Workload API has no schedule timeout
// of its own, so a Workload API gang waits at Permit for the profile's gang
// timeout, exactly as a PodGroup without scheduleTimeoutSeconds does. ok is
// false for the basic policy, whose pods are scheduled one by one.
func FromWorkload(wpg *schedulingv1beta1.PodGroup) (pg *PodGroup, ok bool) {
	gang := wpg.Spec.SchedulingPolicy.Gang
	if gang == nil {
		return nil, false
	}
	pg = New(wpg.Namespace, wpg.Name, gang.MinCount)
	pg.UID, pg.CreationTimestamp, pg.Labels = wpg.UID, wpg.CreationTimestamp, wpg.Labels
	return pg, true
}

// TopologyKey is the node label a Workload API PodGroup's members must all
// share a value of (schedulingConstraints.topology, feature
// TopologyAwareWorkloadScheduling), "" for none. It means what
// schedloop.io/topology-required on the pods means.
func TopologyKey(wpg *schedulingv1beta1.PodGroup) string {
	if c := wpg.Spec.SchedulingConstraints; c != nil && len(c.Topology) > 0 {
		return c.Topology[0].Key
	}
	return ""
}

// NewWorkload is a Workload with one gang template named "workers" of
// minCount members, and the PodGroup made from it, both named name: what a
// job controller creates for one gang. A pod joins it with
// spec.schedulingGroup.podGroupName = name.
func NewWorkload(namespace, name string, minCount int32) (*schedulingv1beta1.Workload, *schedulingv1beta1.PodGroup) {
	const template = "workers"
	policy := schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}}
	w := &schedulingv1beta1.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: schedulingv1beta1.WorkloadSpec{PodGroupTemplates: []schedulingv1beta1.PodGroupTemplate{
			{Name: template, SchedulingPolicy: policy},
		}},
	}
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: schedulingv1beta1.PodGroupSpec{
			WorkloadRef:      &schedulingv1beta1.WorkloadReference{WorkloadName: name, TemplateName: template},
			SchedulingPolicy: policy,
		},
	}
	return w, pg
}

// CreateWorkload creates w and then pg (either may already exist).
func CreateWorkload(ctx context.Context, client kubernetes.Interface, w *schedulingv1beta1.Workload, pg *schedulingv1beta1.PodGroup) error {
	api := client.SchedulingV1beta1()
	if _, err := api.Workloads(w.Namespace).Create(ctx, w, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create workload %s/%s: %w", w.Namespace, w.Name, err)
	}
	if _, err := api.PodGroups(pg.Namespace).Create(ctx, pg, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create workload pod group %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	return nil
}
