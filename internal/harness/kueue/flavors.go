package kueue

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kueueapi "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/schedloop/schedloop/internal/podspec"
)

// FlavorsByGPUModel is one ResourceFlavor per GPU model among nodes, named
// for the model (lower case, anything but letters, digits and '-' as '-')
// and selecting its nodes by GPU feature discovery's product label, so a
// ClusterQueue can hold quota per model. Nodes without the label offer no
// GPU flavour.
func FlavorsByGPUModel(nodes []corev1.Node) []*kueueapi.ResourceFlavor {
	seen := map[string]bool{}
	var out []*kueueapi.ResourceFlavor
	for _, n := range nodes {
		model := n.Labels[podspec.LabelGPUProduct]
		if model == "" || seen[model] {
			continue
		}
		seen[model] = true
		out = append(out, &kueueapi.ResourceFlavor{
			ObjectMeta: metav1.ObjectMeta{Name: FlavorName(model)},
			Spec:       kueueapi.ResourceFlavorSpec{NodeLabels: map[string]string{podspec.LabelGPUProduct: model}},
		})
	}
	slices.SortFunc(out, func(a, b *kueueapi.ResourceFlavor) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// FlavorName is the ResourceFlavor name FlavorsByGPUModel gives a model.
func FlavorName(model string) string {
	b := []byte(strings.ToLower(model))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-")
}
