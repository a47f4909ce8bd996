package podgroup

import (
	"strings"
	"testing"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
)

func TestParseAPI(t *testing.T) {
	for _, a := range APIs {
		if got, err := ParseAPI(string(a)); err != nil || got != a {
			t.Errorf("ParseAPI(%q) = %q, %v", a, got, err)
		}
	}
	for _, bad := range []string{"", "Workload", "crd", "kueue"} {
		_, err := ParseAPI(bad)
		if err == nil || !strings.Contains(err.Error(), `"`+bad+`"`) || !strings.Contains(err.Error(), `"workload"`) {
			t.Errorf("ParseAPI(%q) error %v: want one naming the value and the accepted ones", bad, err)
		}
	}
}

func TestFromWorkload(t *testing.T) {
	_, wpg := NewWorkload("ns", "train", 8)
	pg, ok := FromWorkload(wpg)
	if !ok || pg.Spec.MinMember != 8 || pg.Spec.ScheduleTimeoutSeconds != nil || pg.Namespace != "ns" || pg.Name != "train" {
		t.Fatalf("FromWorkload(gang of 8) = %+v, %v; want minMember 8 and no timeout of its own", pg, ok)
	}
	if TopologyKey(wpg) != "" {
		t.Errorf("TopologyKey without constraints = %q", TopologyKey(wpg))
	}
	wpg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{
		Topology: []schedulingv1beta1.TopologyConstraint{{Key: "topology.schedloop.io/rack"}}}
	if got := TopologyKey(wpg); got != "topology.schedloop.io/rack" {
		t.Errorf("TopologyKey = %q", got)
	}
	wpg.Spec.SchedulingPolicy = schedulingv1beta1.PodGroupSchedulingPolicy{Basic: &schedulingv1beta1.BasicSchedulingPolicy{}}
	if _, ok := FromWorkload(wpg); ok {
		t.Error("a basic-policy PodGroup read as a gang")
	}
}
