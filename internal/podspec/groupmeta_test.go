package podspec_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop/internal/podspec"
)

func TestWithGroupMetaPrecedence(t *testing.T) {
	meta := func(labels, annotations map[string]string) *metav1.ObjectMeta {
		return &metav1.ObjectMeta{Labels: labels, Annotations: annotations}
	}
	q, pre := podspec.LabelQueue, podspec.LabelPreemptible
	topo, kueue := podspec.AnnotationTopologyRequired, podspec.AnnotationKueueTopologyRequired
	tests := []struct {
		name                  string
		pod                   *metav1.ObjectMeta
		group, workload       *metav1.ObjectMeta
		queue, topology       string
		nonPreemptible, extra bool
	}{
		{name: "pod alone", pod: meta(map[string]string{q: "a"}, nil), queue: "a"},
		{name: "workload only", pod: meta(nil, nil),
			workload: meta(map[string]string{q: "w", pre: "false", "team": "x"}, map[string]string{topo: "rack"}),
			queue:    "w", topology: "rack", nonPreemptible: true},
		{name: "pod group before workload", pod: meta(nil, nil),
			group: meta(map[string]string{q: "g"}, nil), workload: meta(map[string]string{q: "w", pre: "false"}, nil),
			queue: "g", nonPreemptible: true},
		{name: "pod wins", pod: meta(map[string]string{q: "p", pre: "true"}, nil),
			group: meta(map[string]string{q: "g", pre: "false"}, nil), workload: meta(map[string]string{q: "w"}, nil),
			queue: "p"},
		{name: "an empty value on the pod is set", pod: meta(map[string]string{q: ""}, nil),
			workload: meta(map[string]string{q: "w"}, nil), queue: ""},
		{name: "the pod's Kueue annotation keeps the group's own out", pod: meta(nil, map[string]string{kueue: "block"}),
			workload: meta(nil, map[string]string{topo: "rack"}), topology: "block"},
		{name: "both topology annotations come from one object", pod: meta(nil, nil),
			group: meta(nil, map[string]string{kueue: "block"}), workload: meta(nil, map[string]string{topo: "rack"}),
			topology: "block"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: *tc.pod}
			before := pod.DeepCopy()
			got := podspec.WithGroupMeta(pod, tc.group, tc.workload)
			if podspec.Queue(got) != tc.queue || podspec.TopologyRequired(got) != tc.topology || podspec.NonPreemptible(got) != tc.nonPreemptible {
				t.Fatalf("queue %q topology %q non-preemptible %v; want %q %q %v",
					podspec.Queue(got), podspec.TopologyRequired(got), podspec.NonPreemptible(got), tc.queue, tc.topology, tc.nonPreemptible)
			}
			if _, ok := got.Labels["team"]; ok {
				t.Fatal("a label schedloop does not read was inherited")
			}
			if pod.String() != before.String() {
				t.Fatal("the pod itself was changed")
			}
		})
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{q: "a"}}}
	if podspec.WithGroupMeta(pod, nil, meta(map[string]string{q: "w"}, nil)) != pod {
		t.Fatal("a pod inheriting nothing was copied")
	}
}
