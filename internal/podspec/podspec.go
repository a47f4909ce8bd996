// Package podspec is the one reading of the GPU-related parts of Kubernetes
// objects that both the scheduler plugins and the collector need, so what the
// scheduler placed on and what the collector records can never disagree.
// It holds no placement rule and no client code.
package podspec

import corev1 "k8s.io/api/core/v1"

// LabelGPUProduct is the GPU model label GPU feature discovery sets on nodes.
const LabelGPUProduct = "nvidia.com/gpu.product"

// GPUModels is the GPU models a pod may run on, when it says so the simple
// ways: a nodeSelector on the product label, or one required node-affinity
// term with an In expression on it. nil means any model; anything richer is
// left to the NodeAffinity filter.
func GPUModels(pod *corev1.Pod) []string {
	if m, ok := pod.Spec.NodeSelector[LabelGPUProduct]; ok {
		return []string{m}
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 {
		return nil
	}
	for _, e := range terms[0].MatchExpressions {
		if e.Key == LabelGPUProduct && e.Operator == corev1.NodeSelectorOpIn {
			return e.Values
		}
	}
	return nil
}
