package podspec

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/dra"
)

type fakeClaims map[string]*resourcev1.ResourceClaimSpec // "claim/ns/name" or "template/ns/name"

func (f fakeClaims) ClaimSpec(ns, name string) (*resourcev1.ResourceClaimSpec, bool) {
	s, ok := f["claim/"+ns+"/"+name]
	return s, ok
}

func (f fakeClaims) TemplateSpec(ns, name string) (*resourcev1.ResourceClaimSpec, bool) {
	s, ok := f["template/"+ns+"/"+name]
	return s, ok
}

func gpuSpec(class string, n int64) *resourcev1.ResourceClaimSpec {
	return &resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
		Name: "r", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, Count: n}}}}}
}

// TestRequestWithClaims: GPUs asked through claims add to those asked as
// extended resources; a made claim is read before its template.
func TestRequestWithClaims(t *testing.T) {
	claims := fakeClaims{
		"template/ml/eight": gpuSpec(dra.ClassGPU, 8),
		"claim/ml/made-x":   gpuSpec(dra.ClassGPU, 2),
		"claim/ml/shared":   gpuSpec(dra.ClassGPU, 1),
		"template/ml/mig":   gpuSpec(dra.ClassMIG, 3),
	}
	pod := func(res corev1.ResourceList, pcs ...corev1.PodResourceClaim) *corev1.Pod {
		p := &corev1.Pod{}
		p.Namespace, p.Name = "ml", "p"
		p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: res}}}
		p.Spec.ResourceClaims = pcs
		return p
	}
	fromTemplate := corev1.PodResourceClaim{Name: "g", ResourceClaimTemplateName: ptr.To("eight")}
	made := pod(nil, fromTemplate)
	made.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "g", ResourceClaimName: ptr.To("made-x")}}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		claims ClaimSpecs
		gpus   int
		err    string
	}{
		{"template before its claim", pod(nil, fromTemplate), claims, 8, ""},
		{"the made claim", made, claims, 2, ""},
		{"named claim beside nvidia.com/gpu", pod(corev1.ResourceList{ResourceGPU: resource.MustParse("1")},
			corev1.PodResourceClaim{Name: "s", ResourceClaimName: ptr.To("shared")}), claims, 2, ""},
		{"MIG counts no whole GPU", pod(nil, corev1.PodResourceClaim{Name: "m", ResourceClaimTemplateName: ptr.To("mig")}), claims, 0, ""},
		{"no reader", pod(nil, fromTemplate), nil, 0, ""},
		{"missing template", pod(nil, corev1.PodResourceClaim{Name: "g", ResourceClaimTemplateName: ptr.To("gone")}), claims, 0,
			"pod ml/p: spec.resourceClaims[g]: claim or template not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RequestWith(tc.pod, tc.claims).GPUs; got != tc.gpus {
				t.Errorf("RequestWith GPUs = %d, want %d", got, tc.gpus)
			}
			_, err := ClaimRequest(tc.pod, tc.claims)
			if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ClaimRequest error %v, want %q", err, tc.err)
			}
		})
	}
}

// TestRequestWithMIGProfiles: a MIG claim whose selector names its profile
// asks for instances of that profile, as nvidia.com/mig-<profile> does, and
// counts toward queues as scoring counts the profile; one naming none, or a
// profile scoring does not know, asks for an instance of any profile.
func TestRequestWithMIGProfiles(t *testing.T) {
	migSpec := func(n int64, cel string) *resourcev1.ResourceClaimSpec {
		s := gpuSpec(dra.ClassMIG, n)
		s.Devices.Requests[0].Exactly.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: cel}}}
		return s
	}
	claims := fakeClaims{
		"template/ml/three": migSpec(2, `device.attributes['gpu.nvidia.com'].profile == '3g.20gb'`),
		"template/ml/any":   gpuSpec(dra.ClassMIG, 1),
		"template/ml/odd":   migSpec(1, `device.attributes["gpu.nvidia.com"].profile == "9g.99gb"`),
	}
	pod := func(res corev1.ResourceList, tpls ...string) *corev1.Pod {
		p := &corev1.Pod{}
		p.Namespace, p.Name = "ml", "p"
		p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: res}}}
		for _, tpl := range tpls {
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: tpl, ResourceClaimTemplateName: ptr.To(tpl)})
		}
		return p
	}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		mig   map[string]int
		milli int64
	}{
		{"named", pod(nil, "three"), map[string]int{"3g.20gb": 2}, 2 * 428},
		{"named and any", pod(nil, "three", "any"), map[string]int{"3g.20gb": 2, "": 1}, 2*428 + 142},
		{"unknown profile", pod(nil, "odd"), map[string]int{"": 1}, 142},
		{"beside the extended resource", pod(corev1.ResourceList{ResourceMIGPrefix + "3g.20gb": resource.MustParse("1")}, "three"),
			map[string]int{"3g.20gb": 3}, 3 * 428},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := RequestWith(tc.pod, claims)
			if !maps.Equal(r.MIG, tc.mig) {
				t.Errorf("MIG = %v, want %v", r.MIG, tc.mig)
			}
			if got := r.CountedMilli(); got != tc.milli {
				t.Errorf("counted %d milli-GPU, want %d", got, tc.milli)
			}
		})
	}
}
