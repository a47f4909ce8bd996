package events

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// TestTrimForWatchKeepsWhatTheWatcherReads: the informers' transform drops
// managed fields, from typed and unstructured objects alike, and leaves
// the labels, annotations and status the watcher stores.
func TestTrimForWatchKeepsWhatTheWatcherReads(t *testing.T) {
	mf := []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"},
		Annotations: map[string]string{"c": "d"}, ManagedFields: mf}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	out, err := trimForWatch(pod)
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	if p.ManagedFields != nil || p.Labels["a"] != "b" || p.Annotations["c"] != "d" || p.Status.Phase != corev1.PodRunning {
		t.Errorf("trimmed pod %+v, want managed fields gone and the rest kept", p.ObjectMeta)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "g", "managedFields": []any{map[string]any{"manager": "x"}}},
		"spec":     map[string]any{"minMember": int64(4)}}}
	if _, err := trimForWatch(u); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedSlice(u.Object, "metadata", "managedFields"); found {
		t.Errorf("PodGroup keeps its managed fields: %v", u.Object["metadata"])
	}
	if n, _, _ := unstructured.NestedInt64(u.Object, "spec", "minMember"); n != 4 {
		t.Errorf("PodGroup minMember %d after the trim, want 4", n)
	}
	// A tombstone passes through untouched.
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}
	if out, err := trimForWatch(tomb); err != nil || out.(cache.DeletedFinalStateUnknown).Key != "ns/p" {
		t.Errorf("tombstone = %v, %v", out, err)
	}
}
