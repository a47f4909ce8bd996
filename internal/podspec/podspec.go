// Package podspec is the one reading of a pod's scheduling facts — what it
// asks of a node (GPUs whole or shared, MIG instances, CPU, memory, GPU
// models), its queue, its gang, its priority and its topology requirement —
// and the one definition of every label, annotation and resource name those
// facts come from. The scheduler plugins, the collector, the harness and the
// trace player all read pods through it, so what the scheduler placed, what
// the collector records and what a replay models can never disagree.
//
// It holds no placement rule and no client code.
package podspec

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/dra"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/scoring"
)

const (
	// ResourceGPU is the whole-GPU extended resource the NVIDIA device
	// plugin advertises.
	ResourceGPU = corev1.ResourceName(schedloop.GPUResourceName)
	// ResourceGPUMilli asks for a share of one GPU, in thousandths (1..999;
	// 1000 is a whole GPU and is asked for as ResourceGPU). A node offering
	// shares advertises it as 1000 per GPU; schedloop's scheduler accounts
	// shares per device, so a share is placed only on a device with that
	// much left, and a pod asks for one or the other, never both.
	ResourceGPUMilli corev1.ResourceName = "schedloop.io/gpu-milli"
	// ResourceMIGPrefix starts the MIG instance resources of the NVIDIA
	// device plugin's mixed strategy (nvidia.com/mig-1g.10gb, ...).
	ResourceMIGPrefix = schedloop.MIGResourcePrefix

	// LabelGPUProduct is the GPU model label GPU feature discovery sets on nodes.
	LabelGPUProduct = "nvidia.com/gpu.product"
	// LabelQueue names a pod's queue: Kueue's label, accepted as is.
	LabelQueue = "kueue.x-k8s.io/queue-name"
	// LabelPodGroup names the scheduler-plugins PodGroup (same namespace) a
	// pod belongs to. A Kubernetes Workload API pod names its PodGroup in
	// spec.schedulingGroup.podGroupName instead; see Gang.
	LabelPodGroup = podgroup.LabelPodGroup

	// LabelPreemptible set to "false" marks a pod preemption never evicts
	// (inference serving, whose restart drops live requests): schedloop's
	// preemption plugin offers no such pod as a victim, and the simulator
	// replays jobs whose pods carry it as non-preemptible. Any other value,
	// or none, leaves the pod preemptible by the usual rules. It says
	// nothing about whether the pod itself may preempt others: that is its
	// PriorityClass's preemptionPolicy (Never for serving that must not
	// evict training either).
	LabelPreemptible = "schedloop.io/preemptible"

	// AnnotationTopologyRequired on a gang's pods requires one topology
	// level, naming it by its label key; AnnotationKueueTopologyRequired,
	// Kueue's, is accepted as is (schedloop's wins when both are set).
	AnnotationTopologyRequired      = "schedloop.io/topology-required"
	AnnotationKueueTopologyRequired = "kueue.x-k8s.io/podset-required-topology"
	// AnnotationGPUDevices on a GPU pod lists the indices of the devices it
	// holds ("0,3"), as schedloop's scheduler chose them when it reserved
	// the pod (written at PreBind). Shares are accounted per device, so the
	// node side must honour the choice: the harness's simulated nodes do,
	// and a device plugin serving shares must. The collector records it.
	AnnotationGPUDevices = "schedloop.io/gpu-devices"
	// AnnotationETA on a pending pod is the collector's estimate of its
	// job's start, JSON: {"state", "p10", "p50", "p90", "made"} (times in
	// RFC 3339; a quantile absent when the job is not expected to start by
	// it). Informational: nothing reads it back.
	AnnotationETA = "schedloop.io/eta"
)

// Facts are a pod's scheduling facts.
type Facts struct {
	// Request is what one pod asks of a node, as kube-scheduler accounts
	// it: the larger of its init containers and the sum of its containers,
	// plus overhead. GPUs counts whole GPUs, or is 1 with GPUMilli set for
	// a share; GPUModels comes from GPUModels.
	Request scoring.Request
	// MIG counts the MIG instances asked for by profile ("1g.10gb"), as
	// the extended resources name them; Request.MIG holds the same counts
	// (and the instances its ResourceClaims ask for, once read with them).
	MIG map[string]int64
	// Queue is the pod's queue, "" for none (never limited).
	Queue string
	// Gang is the pod's PodGroup name, "" for a lone pod; GangKey is
	// namespace/name; GangAPI is the API the group is declared with. A pod
	// naming a group in both APIs has none of the three (Read says why).
	Gang, GangKey string
	GangAPI       podgroup.API
	// Priority is the pod's resolved priority (0 when none was set).
	Priority int32
	// TopologyRequired is the label key of the topology level the pod's
	// gang must stay within, "" for none.
	TopologyRequired string
}

// Read reads pod's scheduling facts. The error names the resource or field
// that no node could honour the way it is written (a share outside 1..999,
// a share beside whole GPUs, a gang declared in both APIs); Facts are still
// filled as far as they could be read, with the share or gang dropped.
func Read(pod *corev1.Pod) (Facts, error) {
	f := Facts{Queue: pod.Labels[LabelQueue], TopologyRequired: TopologyRequired(pod)}
	g, gangErr := Gang(pod)
	f.Gang, f.GangKey, f.GangAPI = g.Name, g.Key, g.API
	if pod.Spec.Priority != nil {
		f.Priority = *pod.Spec.Priority
	}
	var err error
	f.Request, f.MIG, err = request(pod)
	if err == nil {
		err = gangErr
	}
	return f, err
}

// Request is Read's Request alone, with a share that cannot be honoured
// dropped (Read says why). It counts GPUs asked for as extended resources
// only (nvidia.com/gpu, whether the device plugin or DRA serves it); a pod
// asking through ResourceClaims is read by RequestWith.
func Request(pod *corev1.Pod) scoring.Request {
	r, _, _ := request(pod)
	return r
}

// ClaimSpecs finds the specs of the ResourceClaims and templates pods name.
// A nil ClaimSpecs finds none: the pod is read as if it named no claims.
type ClaimSpecs interface {
	ClaimSpec(namespace, name string) (*resourcev1.ResourceClaimSpec, bool)
	TemplateSpec(namespace, name string) (*resourcev1.ResourceClaimSpec, bool)
}

// ClaimRequest is what pod's own ResourceClaims ask of NVIDIA's DRA driver
// (dra.Request), each read from the claim, or from its template while the
// claim is not made yet (a claim made from a template copies its spec).
// The claim the scheduler makes for an extended resource served by DRA is
// not among them: that request is the extended resource's, which Request
// counts. The error names a claim that cannot be found or counted; what
// could be read is still returned.
func ClaimRequest(pod *corev1.Pod, claims ClaimSpecs) (dra.ClaimRequest, error) {
	var total dra.ClaimRequest
	if claims == nil || len(pod.Spec.ResourceClaims) == 0 {
		return total, nil
	}
	var errs []error
	for _, pc := range pod.Spec.ResourceClaims {
		spec, ok := claimSpec(pod, pc, claims)
		if !ok {
			errs = append(errs, fmt.Errorf("pod %s/%s: spec.resourceClaims[%s]: claim or template not found", pod.Namespace, pod.Name, pc.Name))
			continue
		}
		r, err := dra.Request(spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("pod %s/%s: spec.resourceClaims[%s]: %w", pod.Namespace, pod.Name, pc.Name, err))
		}
		total.GPUs += r.GPUs
		total.MIG += r.MIG
		for p, n := range r.Profiles {
			if total.Profiles == nil {
				total.Profiles = map[string]int{}
			}
			total.Profiles[p] += n
		}
	}
	return total, errors.Join(errs...)
}

func claimSpec(pod *corev1.Pod, pc corev1.PodResourceClaim, claims ClaimSpecs) (*resourcev1.ResourceClaimSpec, bool) {
	if pc.ResourceClaimName != nil {
		return claims.ClaimSpec(pod.Namespace, *pc.ResourceClaimName)
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.Name == pc.Name && st.ResourceClaimName != nil {
			if spec, ok := claims.ClaimSpec(pod.Namespace, *st.ResourceClaimName); ok {
				return spec, true
			}
		}
	}
	if pc.ResourceClaimTemplateName != nil {
		return claims.TemplateSpec(pod.Namespace, *pc.ResourceClaimTemplateName)
	}
	return nil, false
}

// RequestWith is Request with the whole GPUs pod's ResourceClaims ask for
// (ClaimRequest) added: one count of a pod's GPUs however it asks for
// them, which every scheduling rule and the simulator read. A share beside
// claimed GPUs is dropped, as a share beside whole GPUs is. The claims' MIG
// instances are added by profile where a selector names it (ClaimMIG), as
// nvidia.com/mig-<profile> names it, and as MIGAnyProfile otherwise.
func RequestWith(pod *corev1.Pod, claims ClaimSpecs) scoring.Request {
	r := Request(pod)
	c, _ := ClaimRequest(pod, claims)
	if c.MIG > 0 {
		r.MIG = maps.Clone(r.MIG)
		if r.MIG == nil {
			r.MIG = map[string]int{}
		}
		unnamed := c.MIG
		for p, n := range ClaimMIG(c, r.GPUModels) {
			r.MIG[p] += n
			unnamed -= n
		}
		if unnamed > 0 {
			// A claim whose selectors name no profile leaves the
			// instance to the allocator.
			r.MIG[scoring.MIGAnyProfile] += unnamed
		}
	}
	if c.GPUs == 0 {
		return r
	}
	if r.Shared() {
		r.GPUs, r.GPUMilli = 0, 0
	}
	r.GPUs += c.GPUs
	return r
}

// ClaimMIG is the MIG instances c asks for by a named profile
// (dra.ClaimRequest.Profiles), those of a profile scoring.MIGMilli refuses
// for models left out: they count as instances of any profile, as a claim
// naming none does. Nil when there are none.
func ClaimMIG(c dra.ClaimRequest, models []string) map[string]int {
	var out map[string]int
	for p, n := range c.Profiles {
		if _, err := scoring.MIGMilli(p, models); err != nil || n <= 0 {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[p] = n
	}
	return out
}

// ReadWith is Read with the GPUs of pod's ResourceClaims counted
// (RequestWith); the error also names a claim that could not be counted.
func ReadWith(pod *corev1.Pod, claims ClaimSpecs) (Facts, error) {
	f, err := Read(pod)
	c, cerr := ClaimRequest(pod, claims)
	if c.GPUs > 0 || c.MIG > 0 {
		f.Request = RequestWith(pod, claims)
	}
	if err == nil {
		err = cerr
	}
	return f, err
}

// maxMIGInstances bounds the MIG instances of one profile a pod may ask
// for: far beyond what any node holds (seven per GPU), and small enough
// that their count in milli-GPU cannot overflow.
const maxMIGInstances = 1 << 20

func request(pod *corev1.Pod) (scoring.Request, map[string]int64, error) {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	r := scoring.Request{CPUMilli: reqs.Cpu().MilliValue(), MemoryMiB: reqs.Memory().Value() >> 20,
		GPUModels: GPUModels(pod)}
	if q, ok := reqs[ResourceGPU]; ok {
		r.GPUs = int(q.Value())
	}
	var mig map[string]int64
	var migErr error
	for name, q := range reqs {
		p, ok := strings.CutPrefix(string(name), ResourceMIGPrefix)
		if !ok || q.IsZero() {
			continue
		}
		if mig == nil {
			mig = map[string]int64{}
		}
		mig[p] = q.Value()
		if n := q.Value(); n < 1 || n > maxMIGInstances || q.Cmp(*resource.NewQuantity(n, resource.DecimalSI)) != 0 {
			migErr = errors.Join(migErr, fmt.Errorf("pod %s/%s: resource %s: %s is not a count of instances (1..%d)",
				pod.Namespace, pod.Name, name, q.String(), maxMIGInstances))
			continue
		}
		if _, err := scoring.MIGMilli(p, r.GPUModels); err != nil {
			// Counted as nothing, as a share no node could honour is.
			migErr = errors.Join(migErr, fmt.Errorf("pod %s/%s: resource %s: %w", pod.Namespace, pod.Name, name, err))
			continue
		}
		if r.MIG == nil {
			r.MIG = map[string]int{}
		}
		r.MIG[p] = int(q.Value())
	}
	q, ok := reqs[ResourceGPUMilli]
	if !ok || q.IsZero() {
		return r, mig, migErr
	}
	milli := q.Value()
	switch {
	case milli < 1 || milli >= scoring.MilliPerGPU || q.Cmp(*resource.NewQuantity(milli, resource.DecimalSI)) != 0:
		return r, mig, fmt.Errorf("pod %s/%s: resource %s: %s is not a share of one GPU (1..%d; ask for whole GPUs as %s)",
			pod.Namespace, pod.Name, ResourceGPUMilli, q.String(), scoring.MilliPerGPU-1, ResourceGPU)
	case r.GPUs > 0:
		return r, mig, fmt.Errorf("pod %s/%s: resource %s: a share beside %d whole %s; ask for one or the other",
			pod.Namespace, pod.Name, ResourceGPUMilli, r.GPUs, ResourceGPU)
	}
	r.GPUs, r.GPUMilli = 1, int(milli)
	return r, mig, migErr
}

// Devices is the devices recorded on pod (AnnotationGPUDevices); ok is
// false when none are, or the record is not a list of device indices.
func Devices(pod *corev1.Pod) (devices []int, ok bool) {
	s := pod.Annotations[AnnotationGPUDevices]
	if s == "" {
		return nil, false
	}
	for _, f := range strings.Split(s, ",") {
		d, err := strconv.Atoi(f)
		if err != nil || d < 0 {
			return nil, false
		}
		devices = append(devices, d)
	}
	return devices, true
}

// FormatDevices is the AnnotationGPUDevices value for devices.
func FormatDevices(devices []int) string {
	parts := make([]string, len(devices))
	for i, d := range devices {
		parts[i] = strconv.Itoa(d)
	}
	return strings.Join(parts, ",")
}

// GangRef is the pod group a pod belongs to.
type GangRef struct {
	// Key is namespace/name: one gang key for both APIs, so queue order,
	// queue accounting, topology plans and reservations treat a Workload API
	// gang exactly as a scheduler-plugins one. A namespace must not use one
	// name in both APIs for different gangs.
	Key, Name string
	API       podgroup.API
}

// Gang is the pod group pod belongs to: the scheduler-plugins label
// (LabelPodGroup) or the Workload API's spec.schedulingGroup.podGroupName.
// The zero GangRef is a lone pod. A pod naming a group both ways is refused:
// each API has its own minimum and policy, and no reading of the two can be
// right for both, so the error says which two names it carries.
func Gang(pod *corev1.Pod) (GangRef, error) {
	label := pod.Labels[LabelPodGroup]
	var workload string
	if sg := pod.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil {
		workload = *sg.PodGroupName
	}
	switch {
	case label != "" && workload != "":
		return GangRef{}, fmt.Errorf("pod %s/%s: belongs to scheduler-plugins PodGroup %q (label %s) and to Workload API PodGroup %q (spec.schedulingGroup.podGroupName); a pod may belong to one gang, declared one way",
			pod.Namespace, pod.Name, label, LabelPodGroup, workload)
	case label != "":
		return GangRef{Key: pod.Namespace + "/" + label, Name: label, API: podgroup.APIPodGroup}, nil
	case workload != "":
		return GangRef{Key: pod.Namespace + "/" + workload, Name: workload, API: podgroup.APIWorkload}, nil
	}
	return GangRef{}, nil
}

// GangKey is namespace/name of the pod group pod belongs to, in either API
// (see Gang); ok is false for a lone pod and for one declared both ways.
func GangKey(pod *corev1.Pod) (key, name string, ok bool) {
	g, err := Gang(pod)
	if err != nil || g.Key == "" {
		return "", "", false
	}
	return g.Key, g.Name, true
}

// NonPreemptible reports whether pod is marked never to be a preemption
// victim (LabelPreemptible: "false").
func NonPreemptible(pod *corev1.Pod) bool { return pod.Labels[LabelPreemptible] == "false" }

// Queue is the queue pod is submitted to, "" for none.
func Queue(pod *corev1.Pod) string { return pod.Labels[LabelQueue] }

// TopologyRequired is the label key of the topology level pod's gang must
// stay within, "" for none.
func TopologyRequired(pod *corev1.Pod) string {
	if v := pod.Annotations[AnnotationTopologyRequired]; v != "" {
		return v
	}
	return pod.Annotations[AnnotationKueueTopologyRequired]
}

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

// Resources is the resource list a pod (one container) asks for to get r:
// whole GPUs as ResourceGPU, a share as ResourceGPUMilli, MIG instances of
// a named profile as ResourceMIGPrefix+profile. The trace player
// writes pods with it, so a replayed job asks live for what the simulator
// models.
func Resources(r scoring.Request) corev1.ResourceList {
	out := corev1.ResourceList{}
	switch {
	case r.Shared():
		out[ResourceGPUMilli] = *resource.NewQuantity(int64(r.GPUMilli), resource.DecimalSI)
	case r.GPUs > 0:
		out[ResourceGPU] = *resource.NewQuantity(int64(r.GPUs), resource.DecimalSI)
	}
	for p, c := range r.MIG {
		if p != scoring.MIGAnyProfile && c > 0 {
			out[corev1.ResourceName(ResourceMIGPrefix+p)] = *resource.NewQuantity(int64(c), resource.DecimalSI)
		}
	}
	if r.CPUMilli > 0 {
		out[corev1.ResourceCPU] = *resource.NewMilliQuantity(r.CPUMilli, resource.DecimalSI)
	}
	if r.MemoryMiB > 0 {
		out[corev1.ResourceMemory] = *resource.NewQuantity(r.MemoryMiB<<20, resource.BinarySI)
	}
	return out
}

// Evicted reports whether pod was marked for deletion by an eviction: the
// DisruptionTarget condition, which the scheduler's preemption (and the
// API's eviction) sets before deleting it. The controller that made such a
// pod makes a new one for the same job; a pod deleted without it was
// removed for good.
func Evicted(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// Leaving reports whether pod is on its way out: deleted (a deletion
// timestamp, its grace period running) or evicted (Evicted), the condition
// an eviction writes before it deletes the pod. Such a pod still holds its
// node's resources but no longer counts as a member of its job: the job's
// controller makes a new pod in its place.
func Leaving(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil || Evicted(pod)
}

// LoneJob is the UID and name of the job a pod outside any gang belongs
// to: the Job controller's (batchv1.ControllerUidLabel, JobNameLabel), so
// that a pod made in place of an evicted one joins the same job; else the
// pod's own, a bare pod being its own job.
func LoneJob(pod *corev1.Pod) (uid, name string) {
	if uid := pod.Labels[batchv1.ControllerUidLabel]; uid != "" {
		name := pod.Labels[batchv1.JobNameLabel]
		if name == "" {
			name = pod.Name
		}
		return uid, name
	}
	return string(pod.UID), pod.Name
}
