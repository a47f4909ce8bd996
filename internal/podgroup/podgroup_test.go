package podgroup

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop"
)

func TestCRDDecodes(t *testing.T) {
	crd, err := CRD()
	if err != nil {
		t.Fatal(err)
	}
	if crd.Name != "podgroups."+Group || crd.Spec.Names.Kind != Kind || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != Version {
		t.Fatalf("crd %s %+v", crd.Name, crd.Spec.Names)
	}
	props := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties
	for _, f := range []string{"minMember", "minResources", "scheduleTimeoutSeconds"} {
		if _, ok := props[f]; !ok {
			t.Errorf("spec.%s missing from the schema", f)
		}
	}
	// The apiserver is the first place an oversized gang is refused; the
	// collector, tuner and trace readers refuse the same bound.
	mm := props["minMember"]
	if mm.Maximum == nil || *mm.Maximum != schedloop.MaxGangMembers {
		t.Errorf("spec.minMember maximum = %v, want schedloop.MaxGangMembers (%d)", mm.Maximum, schedloop.MaxGangMembers)
	}
}

func TestUnstructuredRoundTrip(t *testing.T) {
	pg := New("ns", "g", 3)
	pg.Spec.ScheduleTimeoutSeconds = ptr.To[int32](10)
	pg.Spec.MinResources = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("24")}
	pg.Labels = map[string]string{"a": "b"}
	u, err := ToUnstructured(pg)
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAPIVersion() != "scheduling.x-k8s.io/v1alpha1" || u.GetKind() != "PodGroup" {
		t.Fatalf("type meta %s %s", u.GetAPIVersion(), u.GetKind())
	}
	back, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	q := back.Spec.MinResources["nvidia.com/gpu"]
	if back.Spec.MinMember != 3 || *back.Spec.ScheduleTimeoutSeconds != 10 || q.Value() != 24 || back.Labels["a"] != "b" {
		t.Fatalf("round trip: %+v", back)
	}
}
