package podspec

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGPUModels(t *testing.T) {
	affinity := func(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
	in := func(key string, values ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}}}
	}
	tests := []struct {
		name string
		spec corev1.PodSpec
		want []string
	}{
		{"none", corev1.PodSpec{}, nil},
		{"node selector", corev1.PodSpec{NodeSelector: map[string]string{LabelGPUProduct: "A100"}}, []string{"A100"}},
		{"affinity In", corev1.PodSpec{Affinity: affinity(in(LabelGPUProduct, "A100", "H100"))}, []string{"A100", "H100"}},
		{"affinity on another key", corev1.PodSpec{Affinity: affinity(in("zone", "a"))}, nil},
		{"two terms (OR) are left to the filter", corev1.PodSpec{Affinity: affinity(in(LabelGPUProduct, "A100"), in(LabelGPUProduct, "T4"))}, nil},
		{"NotIn is left to the filter", corev1.PodSpec{Affinity: affinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: LabelGPUProduct, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"T4"}}}})}, nil},
	}
	for _, tc := range tests {
		if got := GPUModels(&corev1.Pod{Spec: tc.spec}); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: GPUModels = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestLeaving(t *testing.T) {
	now := metav1.Now()
	evicted := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonPreemptionByScheduler}
	tests := []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"running", corev1.Pod{}, false},
		{"deleted", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, true},
		{"evicted, not yet deleted", corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{evicted}}}, true},
		{"a disruption target no longer", corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse}}}}, false},
	}
	for _, tt := range tests {
		if got := Leaving(&tt.pod); got != tt.want {
			t.Errorf("%s: Leaving = %v, want %v", tt.name, got, tt.want)
		}
	}
}
