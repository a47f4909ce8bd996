package kueue

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop/internal/podspec"
)

func TestFlavorsByGPUModel(t *testing.T) {
	node := func(name, model string) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if model != "" {
			n.Labels[podspec.LabelGPUProduct] = model
		}
		return n
	}
	got := FlavorsByGPUModel([]corev1.Node{
		node("a", "NVIDIA-H100-80GB-HBM3"), node("b", "A100"), node("c", ""), node("d", "A100"),
	})
	want := []struct{ name, model string }{{"a100", "A100"}, {"nvidia-h100-80gb-hbm3", "NVIDIA-H100-80GB-HBM3"}}
	if len(got) != len(want) {
		t.Fatalf("got %d flavors, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Spec.NodeLabels[podspec.LabelGPUProduct] != w.model || len(got[i].Spec.NodeLabels) != 1 {
			t.Errorf("flavor %d = %s %v, want %s selecting %s", i, got[i].Name, got[i].Spec.NodeLabels, w.name, w.model)
		}
	}
	if n := FlavorName("Tesla V100 (SXM2)"); n != "tesla-v100--sxm2" {
		t.Errorf("FlavorName = %q", n)
	}
}
