package core

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
)

// NodeMayAdmit reports whether a node's change (old nil: the node was
// added) may let pod, refused before, fit where it did not: the node is
// new, became schedulable, offers more of some resource, no longer has a
// taint the pod does not tolerate, or its labels changed and satisfy the
// pod's required node affinity (a topology label may also have moved the
// node into another domain). kube-scheduler's NodeResourcesFit,
// NodeUnschedulable, TaintToleration and NodeAffinity ask the same of a
// node event in their queueing hints. A nil pod stands for any pod: every
// taint counts and affinity is not read.
func NodeMayAdmit(pod *v1.Pod, old, node *v1.Node) bool {
	if node == nil {
		return false
	}
	if old == nil {
		return true
	}
	if old.Spec.Unschedulable && !node.Spec.Unschedulable {
		return true
	}
	for name, q := range node.Status.Allocatable {
		if was, ok := old.Status.Allocatable[name]; !ok || q.Cmp(was) > 0 {
			return true
		}
	}
	if untolerated(pod, old) && !untolerated(pod, node) {
		return true
	}
	if !equality.Semantic.DeepEqual(old.Labels, node.Labels) {
		if pod == nil {
			return true
		}
		match, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
		return err != nil || match
	}
	return false
}

// untolerated: node has a NoSchedule or NoExecute taint that pod does
// not tolerate (any such taint, for a nil pod).
func untolerated(pod *v1.Pod, node *v1.Node) bool {
	var tolerations []v1.Toleration
	if pod != nil {
		tolerations = pod.Spec.Tolerations
	}
	_, found := v1helper.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, tolerations, func(t *v1.Taint) bool {
		return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
	}, utilfeature.DefaultFeatureGate.Enabled(features.TaintTolerationComparisonOperators))
	return found
}

// nodeChanged ends every gang's gate when a node's change may admit some
// pod (NodeMayAdmit): the scheduler asks the gang plugin's hint, which
// ends one gang's gate, only when no other plugin's hint queued the pod
// first (see WakeCheck).
func (m *Manager) nodeChanged(old, obj any) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return
	}
	was, _ := old.(*v1.Node)
	if NodeMayAdmit(nil, was, node) {
		m.wakeAll()
	}
}
