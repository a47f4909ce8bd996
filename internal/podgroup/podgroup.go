// Package podgroup is schedloop's copy of the scheduler-plugins PodGroup API
// (scheduling.x-k8s.io/v1alpha1): the CRD that clusters need installed, the
// Go type, and dynamic-client helpers to create, read and list groups. It
// also reads the Kubernetes Workload API's pod groups (scheduling.k8s.io,
// workload.go) as the same gang, and makes them the way a job controller
// does, so both kinds of gang mean one thing to schedloop.
//
// It deliberately does not import sigs.k8s.io/scheduler-plugins, whose
// Kubernetes dependencies conflict with ours. It holds no gang logic.
package podgroup

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apiextensionsclientv1 "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// API coordinates and the well-known pod label.
const (
	Group   = "scheduling.x-k8s.io"
	Version = "v1alpha1"
	Kind    = "PodGroup"
	// LabelPodGroup on a pod names the PodGroup (same namespace) it belongs to.
	LabelPodGroup = "scheduling.x-k8s.io/pod-group"
)

// GVR is the PodGroup resource for dynamic clients.
var GVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "podgroups"}

// Phases a PodGroup's status may report.
const (
	PhasePending       = "Pending"
	PhasePreScheduling = "PreScheduling"
	PhaseScheduling    = "Scheduling"
	PhaseScheduled     = "Scheduled"
	PhaseRunning       = "Running"
	PhaseFinished      = "Finished"
	PhaseFailed        = "Failed"
)

// PodGroup is a gang of pods scheduled all-or-nothing.
type PodGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec,omitempty"`
	Status            Status `json:"status,omitempty"`
}

// Spec is what the gang needs before any member may run.
type Spec struct {
	MinMember              int32               `json:"minMember,omitempty"`
	MinResources           corev1.ResourceList `json:"minResources,omitempty"`
	ScheduleTimeoutSeconds *int32              `json:"scheduleTimeoutSeconds,omitempty"`
}

// Status is the observed state of the gang.
type Status struct {
	Phase             string       `json:"phase,omitempty"`
	OccupiedBy        string       `json:"occupiedBy,omitempty"`
	Scheduled         int32        `json:"scheduled,omitempty"`
	Running           int32        `json:"running,omitempty"`
	Succeeded         int32        `json:"succeeded,omitempty"`
	Failed            int32        `json:"failed,omitempty"`
	ScheduleStartTime *metav1.Time `json:"scheduleStartTime,omitempty"`
}

//go:embed crd.yaml
var crdYAML []byte

// CRDYAML is the CustomResourceDefinition manifest, for kubectl apply.
func CRDYAML() []byte { return append([]byte(nil), crdYAML...) }

// CRD decodes the embedded CustomResourceDefinition.
func CRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(crdYAML, &crd); err != nil {
		return nil, fmt.Errorf("decode podgroup crd: %w", err)
	}
	return &crd, nil
}

// InstallCRD creates the PodGroup CRD (or leaves an existing one) and waits
// until the apiserver serves it.
func InstallCRD(ctx context.Context, cfg *rest.Config) error {
	crd, err := CRD()
	if err != nil {
		return err
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("apiextensions client: %w", err)
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create podgroup crd: %w", err)
	}
	if err := WaitEstablished(ctx, crds, crd.Name); err != nil {
		return fmt.Errorf("wait for podgroup crd to be established: %w", err)
	}
	return nil
}

// WaitEstablished waits up to a minute until the apiserver reports the
// named CRD Established, so its resources are served.
func WaitEstablished(ctx context.Context, crds apiextensionsclientv1.CustomResourceDefinitionInterface, name string) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// New returns a PodGroup with type metadata set.
func New(namespace, name string, minMember int32) *PodGroup {
	return &PodGroup{
		TypeMeta:   metav1.TypeMeta{APIVersion: Group + "/" + Version, Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       Spec{MinMember: minMember},
	}
}

// ToUnstructured converts pg for a dynamic client.
func ToUnstructured(pg *PodGroup) (*unstructured.Unstructured, error) {
	pg = pg.DeepCopy()
	pg.APIVersion, pg.Kind = Group+"/"+Version, Kind
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pg)
	if err != nil {
		return nil, fmt.Errorf("podgroup %s/%s to unstructured: %w", pg.Namespace, pg.Name, err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// FromUnstructured converts what a dynamic client or informer returns.
func FromUnstructured(u *unstructured.Unstructured) (*PodGroup, error) {
	var pg PodGroup
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pg); err != nil {
		return nil, fmt.Errorf("podgroup %s/%s from unstructured: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &pg, nil
}

// Create creates pg through a dynamic client.
func Create(ctx context.Context, dyn dynamic.Interface, pg *PodGroup) (*PodGroup, error) {
	u, err := ToUnstructured(pg)
	if err != nil {
		return nil, err
	}
	out, err := dyn.Resource(GVR).Namespace(pg.Namespace).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create podgroup %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	return FromUnstructured(out)
}

// Get reads one PodGroup.
func Get(ctx context.Context, dyn dynamic.Interface, namespace, name string) (*PodGroup, error) {
	u, err := dyn.Resource(GVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get podgroup %s/%s: %w", namespace, name, err)
	}
	return FromUnstructured(u)
}

// List reads the PodGroups of a namespace ("" for all).
func List(ctx context.Context, dyn dynamic.Interface, namespace string) ([]PodGroup, error) {
	l, err := dyn.Resource(GVR).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list podgroups in %q: %w", namespace, err)
	}
	out := make([]PodGroup, 0, len(l.Items))
	for i := range l.Items {
		pg, err := FromUnstructured(&l.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, *pg)
	}
	return out, nil
}

// UpdateStatus writes pg's status subresource.
func UpdateStatus(ctx context.Context, dyn dynamic.Interface, pg *PodGroup) (*PodGroup, error) {
	u, err := ToUnstructured(pg)
	if err != nil {
		return nil, err
	}
	out, err := dyn.Resource(GVR).Namespace(pg.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update podgroup %s/%s status: %w", pg.Namespace, pg.Name, err)
	}
	return FromUnstructured(out)
}

// DeepCopy copies pg.
func (pg *PodGroup) DeepCopy() *PodGroup {
	out := *pg
	pg.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if pg.Spec.MinResources != nil {
		out.Spec.MinResources = pg.Spec.MinResources.DeepCopy()
	}
	if pg.Spec.ScheduleTimeoutSeconds != nil {
		v := *pg.Spec.ScheduleTimeoutSeconds
		out.Spec.ScheduleTimeoutSeconds = &v
	}
	if pg.Status.ScheduleStartTime != nil {
		out.Status.ScheduleStartTime = pg.Status.ScheduleStartTime.DeepCopy()
	}
	return &out
}
