package etaserve

import (
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	schedloop "github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/podspec"
)

// MaxManifestBytes bounds a what-if's manifest: far above any pod or Job a
// person writes, far below what could tie up the estimate.
const MaxManifestBytes = 256 << 10

// WhatIfUID is the UID a what-if's job is estimated under.
const WhatIfUID = "what-if"

// JobFromManifest reads the job a manifest would submit, in JSON or YAML:
// a Pod (a gang's member when it names a PodGroup; the gang's size is
// then the group's min members, which the manifest does not carry, so
// members says it), or a batch/v1 Job (its parallelism pods of its
// template, all-or-nothing when the template names a PodGroup; otherwise
// its first pod, whose start is the Job's). The error names the field that
// is wrong.
func JobFromManifest(data []byte, members int) (schedloop.Job, error) {
	if len(data) > MaxManifestBytes {
		return schedloop.Job{}, fmt.Errorf("manifest: %d bytes, over the limit of %d", len(data), MaxManifestBytes)
	}
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(data, &meta); err != nil {
		return schedloop.Job{}, fmt.Errorf("manifest: does not decode: %w", err)
	}
	var pod corev1.Pod
	count := 1
	switch meta.Kind {
	case "Pod":
		if err := yaml.UnmarshalStrict(data, &pod); err != nil {
			return schedloop.Job{}, fmt.Errorf("manifest: Pod does not decode: %w", err)
		}
	case "Job":
		var job batchv1.Job
		if err := yaml.UnmarshalStrict(data, &job); err != nil {
			return schedloop.Job{}, fmt.Errorf("manifest: Job does not decode: %w", err)
		}
		pod = corev1.Pod{ObjectMeta: job.Spec.Template.ObjectMeta, Spec: job.Spec.Template.Spec}
		pod.Namespace, pod.Name = job.Namespace, job.Name
		if job.Spec.Parallelism != nil {
			if *job.Spec.Parallelism < 1 {
				return schedloop.Job{}, fmt.Errorf("manifest: field spec.parallelism: %d is below 1", *job.Spec.Parallelism)
			}
			count = int(*job.Spec.Parallelism)
		}
	case "":
		return schedloop.Job{}, fmt.Errorf("manifest: field kind is missing (want Pod or Job)")
	default:
		return schedloop.Job{}, fmt.Errorf("manifest: field kind: %q is not Pod or Job", meta.Kind)
	}
	defaultRequests(&pod)
	if err := knownResources(&pod); err != nil {
		return schedloop.Job{}, err
	}
	f, err := podspec.Read(&pod)
	if err != nil {
		return schedloop.Job{}, fmt.Errorf("manifest: %w", err)
	}
	if members < 0 || members > schedloop.MaxGangMembers {
		return schedloop.Job{}, fmt.Errorf("members: %d is outside 0..%d", members, schedloop.MaxGangMembers)
	}
	if f.Gang != "" {
		count = max(count, members)
	}
	j := schedloop.Job{UID: WhatIfUID, Namespace: pod.Namespace, Name: pod.Name, Kind: schedloop.JobKindPod, Queue: f.Queue,
		Priority: f.Priority, MinMember: 1, GPUsPerMember: f.Request.GPUs, CPUMilliPerMember: f.Request.CPUMilli,
		MemoryMiBPerMember: f.Request.MemoryMiB, GPUModels: f.Request.GPUModels}
	if len(j.GPUModels) == 0 {
		j.GPUModels = nil
	}
	if j.Namespace == "" {
		j.Namespace = "default"
	}
	if f.Request.Shared() {
		j.GPUMilliPerMember = f.Request.GPUMilli
	}
	if f.Gang != "" {
		j.Kind, j.MinMember = schedloop.JobKindGang, count
	}
	if j.Name == "" {
		j.Name = "what-if"
	}
	return j, nil
}

// defaultRequests gives each container a request for every resource it
// only limits, as the apiserver's defaulting does on submission: a
// manifest read here was never submitted.
func defaultRequests(pod *corev1.Pod) {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			r := &cs[i].Resources
			for name, q := range r.Limits {
				if _, ok := r.Requests[name]; !ok {
					if r.Requests == nil {
						r.Requests = corev1.ResourceList{}
					}
					r.Requests[name] = q
				}
			}
		}
	}
}

// knownResources refuses a request for a resource no node of a GPU cluster
// offers schedloop's accounting of: what would never fit is a mistake in
// the manifest, not a wait.
func knownResources(pod *corev1.Pod) error {
	for _, part := range []struct {
		field string
		cs    []corev1.Container
	}{{"spec.initContainers", pod.Spec.InitContainers}, {"spec.containers", pod.Spec.Containers}} {
		for i, c := range part.cs {
			for name := range c.Resources.Requests {
				n := string(name)
				switch {
				case name == corev1.ResourceCPU, name == corev1.ResourceMemory, name == corev1.ResourceEphemeralStorage,
					name == podspec.ResourceGPU, name == podspec.ResourceGPUMilli, strings.HasPrefix(n, podspec.ResourceMIGPrefix), strings.HasPrefix(n, corev1.ResourceHugePagesPrefix):
				default:
					return fmt.Errorf("manifest: field %s[%d].resources: resource %q: no node offers it", part.field, i, n)
				}
			}
		}
	}
	return nil
}
