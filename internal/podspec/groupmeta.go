package podspec

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A Workload API gang's pods are often made by a job controller that puts
// the job's labels and annotations on the Workload (and perhaps the
// PodGroup made from it) rather than on every pod. The facts schedloop
// reads from labels and annotations are therefore read through
// WithGroupMeta, with this precedence rule, the one both the scheduler
// plugins and the collector apply:
//
//   - the pod's own value wins;
//   - else its Workload API PodGroup's;
//   - else that PodGroup's Workload's.
//
// Only the facts defined here are taken (inherited), each as a whole: a pod
// that carries either topology annotation takes neither from its group, so
// a group's schedloop.io/topology-required never overrides the pod's own
// Kueue annotation. A key present with an empty value counts as set. A
// scheduler-plugins PodGroup's metadata is not inherited: that API puts
// the job's facts on its pods. Priority is not a label: it is each pod's
// resolved spec.priority (the Workload API of Kubernetes 1.37 has no
// priority of its own).
var inherited = []struct {
	labels, annotations []string
}{
	{labels: []string{LabelQueue}},
	{labels: []string{LabelPreemptible}},
	{annotations: []string{AnnotationTopologyRequired, AnnotationKueueTopologyRequired}},
}

// WithGroupMeta is pod as schedloop reads it when its gang's objects carry
// metadata: metas are the gang's objects nearest first (its PodGroup, then
// its Workload; nil entries are skipped). It returns pod itself when
// nothing is inherited, else a shallow copy with new label and annotation
// maps; pod is never modified.
func WithGroupMeta(pod *corev1.Pod, metas ...*metav1.ObjectMeta) *corev1.Pod {
	var labels, annotations map[string]string
	for _, fact := range inherited {
		if hasAny(pod.Labels, fact.labels) || hasAny(pod.Annotations, fact.annotations) {
			continue
		}
		for _, m := range metas {
			if m == nil || !hasAny(m.Labels, fact.labels) && !hasAny(m.Annotations, fact.annotations) {
				continue
			}
			labels = copyKeys(labels, pod.Labels, m.Labels, fact.labels)
			annotations = copyKeys(annotations, pod.Annotations, m.Annotations, fact.annotations)
			break
		}
	}
	if labels == nil && annotations == nil {
		return pod
	}
	out := *pod
	if labels != nil {
		out.Labels = labels
	}
	if annotations != nil {
		out.Annotations = annotations
	}
	return &out
}

func hasAny(m map[string]string, keys []string) bool {
	for _, k := range keys {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

// copyKeys adds from's values of keys to dst, starting dst as a copy of
// own on first use.
func copyKeys(dst, own, from map[string]string, keys []string) map[string]string {
	for _, k := range keys {
		v, ok := from[k]
		if !ok {
			continue
		}
		if dst == nil {
			dst = make(map[string]string, len(own)+len(keys))
			for ok, ov := range own {
				dst[ok] = ov
			}
		}
		dst[k] = v
	}
	return dst
}
