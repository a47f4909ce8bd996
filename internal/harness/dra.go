package harness

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/dra"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/trace"
)

// The simulated DRA driver stands in for NVIDIA's GPU kubelet plugin at its
// real interface, the API: per node it publishes ResourceSlices of the
// node's GPUs (and of their MIG partitions, as partitionable devices drawing
// on per-GPU shared counters), the DeviceClasses the driver's chart
// installs, and, as the plugin's NodePrepareResources would, marks each
// allocated device Ready in its claim's status when the pod starts and
// drops the mark when it ends. The in-tree DynamicResources plugin
// allocates; kube-controller-manager's ResourceClaim controller, run here,
// creates claims from templates and releases them when their pods end.

// migGeometry is the H100/H200 MIG geometry NVIDIA's MIG User Guide lists:
// for each profile, the memory slices (of eight) an instance takes, the
// first slice of each placement, and its streaming multiprocessors (of 132).
var migGeometry = map[string]struct {
	size   int
	starts []int
	sms    int64
}{
	"1g.10gb": {1, []int{0, 1, 2, 3, 4, 5, 6}, 16},
	"1g.20gb": {2, []int{0, 2, 4, 6}, 16},
	"2g.20gb": {2, []int{0, 2, 4}, 32},
	"3g.40gb": {4, []int{0, 4}, 60},
	"4g.40gb": {4, []int{0}, 64},
	"7g.80gb": {8, []int{0}, 132},
}

const (
	memorySlices = 8
	wholeGPUSMs  = 132
	// devicesSlicePrefix and countersSlicePrefix name a node's slices.
	countersPerSlice = resourcev1.ResourceSliceMaxCounterSets
)

// DeviceClasses are the classes NVIDIA's chart installs. The GPU class maps
// the nvidia.com/gpu extended resource onto DRA: on a node that does not
// advertise it (no device plugin), a pod asking for nvidia.com/gpu is
// served by a claim the scheduler makes from this class.
func DeviceClasses() []*resourcev1.DeviceClass {
	class := func(name, typ string) *resourcev1.DeviceClass {
		return &resourcev1.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].%s == %q", dra.Driver, dra.Driver, dra.AttrType, typ),
			}}}},
		}
	}
	gpu := class(dra.ClassGPU, dra.TypeGPU)
	gpu.Spec.ExtendedResourceName = ptr.To(string(podspec.ResourceGPU))
	return []*resourcev1.DeviceClass{gpu, class(dra.ClassMIG, dra.TypeMIG)}
}

// GPUDeviceName is the name the driver gives GPU i of a node.
func GPUDeviceName(i int) string { return "gpu-" + strconv.Itoa(i) }

// migDeviceName follows the driver's gpu-<minor>-mig-<profile id>-<start>-<size>;
// the profile is named rather than numbered, as the simulation has no NVML
// profile ids.
func migDeviceName(gpu int, profile string, start, size int) string {
	return fmt.Sprintf("gpu-%d-mig-%s-%d-%d", gpu, strings.ReplaceAll(profile, ".", ""), start, size)
}

// gpuIndex is the GPU a device of this driver belongs to, from its name.
func gpuIndex(device string) (int, bool) {
	rest, ok := strings.CutPrefix(device, "gpu-")
	if !ok {
		return 0, false
	}
	if i := strings.IndexByte(rest, '-'); i >= 0 {
		rest = rest[:i]
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// migProfiles are the MIG profiles spec lists (nvidia.com/mig-<profile>)
// that the simulated geometry knows, sorted; others are left out.
func migProfiles(spec trace.Node) []string {
	var out []string
	for name, n := range spec.MIG {
		p, ok := strings.CutPrefix(name, podspec.ResourceMIGPrefix)
		if _, known := migGeometry[p]; ok && known && n > 0 {
			out = append(out, p)
		}
	}
	slicesSort(out)
	return out
}

func slicesSort(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// resourceSlices are the slices the driver publishes for m: one of whole
// GPUs, or, where the node lists MIG profiles, counter slices (eight GPUs
// each, the API's limit) and one device slice per GPU holding the GPU and
// every placement of each profile.
func resourceSlices(m *machine, node *corev1.Node) []*resourcev1.ResourceSlice {
	spec := m.spec
	profiles := migProfiles(spec)
	owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
	mk := func(name string) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owner},
			Spec: resourcev1.ResourceSliceSpec{
				Driver:   dra.Driver,
				NodeName: ptr.To(spec.Name),
				Pool:     resourcev1.ResourcePool{Name: spec.Name, Generation: 1},
			},
		}
	}
	var out []*resourcev1.ResourceSlice
	if len(profiles) == 0 {
		s := mk(spec.Name + "-" + dra.Driver)
		for i := range spec.GPUs {
			s.Spec.Devices = append(s.Spec.Devices, gpuDevice(m, node, i))
		}
		out = append(out, s)
	} else {
		for first := 0; first < spec.GPUs; first += countersPerSlice {
			s := mk(fmt.Sprintf("%s-%s-counters-%d", spec.Name, dra.Driver, first/countersPerSlice))
			for i := first; i < min(first+countersPerSlice, spec.GPUs); i++ {
				counters := map[string]resourcev1.Counter{"multiprocessors": {Value: *resource.NewQuantity(wholeGPUSMs, resource.DecimalSI)}}
				for k := range memorySlices {
					counters["memory-slice-"+strconv.Itoa(k)] = resourcev1.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
				}
				s.Spec.SharedCounters = append(s.Spec.SharedCounters, resourcev1.CounterSet{Name: counterSet(i), Counters: counters})
			}
			out = append(out, s)
		}
		for i := range spec.GPUs {
			s := mk(fmt.Sprintf("%s-%s-gpu-%d", spec.Name, dra.Driver, i))
			whole := gpuDevice(m, node, i)
			whole.ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: counterSet(i), Counters: consumption(0, memorySlices, wholeGPUSMs)}}
			s.Spec.Devices = append(s.Spec.Devices, whole)
			for _, p := range profiles {
				g := migGeometry[p]
				for _, start := range g.starts {
					d := gpuDevice(m, node, i)
					d.Name = migDeviceName(i, p, start, g.size)
					d.Attributes[dra.AttrType] = resourcev1.DeviceAttribute{StringValue: ptr.To(dra.TypeMIG)}
					d.Attributes[dra.AttrParentUUID] = resourcev1.DeviceAttribute{StringValue: ptr.To(m.uuid[i])}
					d.Attributes[dra.AttrUUID] = resourcev1.DeviceAttribute{StringValue: ptr.To(migUUID(m.uuid[i], p, start))}
					d.Attributes[dra.AttrProfile] = resourcev1.DeviceAttribute{StringValue: ptr.To(p)}
					d.Capacity[dra.CapMemory] = resourcev1.DeviceCapacity{Value: *resource.NewQuantity(gpuMemory(spec)<<20*int64(g.size)/memorySlices, resource.BinarySI)}
					d.ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: counterSet(i), Counters: consumption(start, g.size, g.sms)}}
					s.Spec.Devices = append(s.Spec.Devices, d)
				}
			}
			out = append(out, s)
		}
	}
	for _, s := range out {
		s.Spec.Pool.ResourceSliceCount = int64(len(out))
	}
	return out
}

func counterSet(gpu int) string { return "gpu-" + strconv.Itoa(gpu) + "-counter-set" }

func consumption(start, size int, sms int64) map[string]resourcev1.Counter {
	c := map[string]resourcev1.Counter{"multiprocessors": {Value: *resource.NewQuantity(sms, resource.DecimalSI)}}
	for k := start; k < start+size; k++ {
		c["memory-slice-"+strconv.Itoa(k)] = resourcev1.Counter{Value: *resource.NewQuantity(1, resource.DecimalSI)}
	}
	return c
}

// migUUID is a stable MIG device UUID under its GPU's.
func migUUID(parent, profile string, start int) string {
	return "MIG-" + strings.TrimPrefix(parent, "GPU-")[:23] + fmt.Sprintf("-%s-%d", strings.ReplaceAll(profile, ".", ""), start)
}

// gpuDevice is GPU i of m with the attributes NVIDIA's driver publishes:
// type, uuid, productName, pcieBusID and memory, the standard NUMA node and
// PCIe root (two GPUs per PCIe switch, half the GPUs per socket), and the
// NVLink clique from the node's NVLink-domain label where it has one.
func gpuDevice(m *machine, node *corev1.Node, i int) resourcev1.Device {
	spec := m.spec
	numa := int64(0)
	if spec.GPUs > 1 {
		numa = int64(i / ((spec.GPUs + 1) / 2))
	}
	attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		dra.AttrType:        {StringValue: ptr.To(dra.TypeGPU)},
		dra.AttrUUID:        {StringValue: ptr.To(m.uuid[i])},
		dra.AttrProductName: {StringValue: ptr.To(modelName(spec.GPUModel))},
		dra.AttrPCIeBusID:   {StringValue: ptr.To(fmt.Sprintf("0000:%02x:00.0", 0x18+i*0x10))},
		dra.AttrNUMANode:    {IntValue: ptr.To(numa)},
		dra.AttrPCIeRoot:    {StringValue: ptr.To(fmt.Sprintf("pci0000:%02x", 0x10+(i/2)*0x20))},
	}
	if clique := node.Labels[trace.LabelNVLinkDomain]; clique != "" {
		attrs[dra.AttrClique] = resourcev1.DeviceAttribute{StringValue: ptr.To(clique)}
	}
	return resourcev1.Device{
		Name:       GPUDeviceName(i),
		Attributes: attrs,
		Capacity:   map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{dra.CapMemory: {Value: *resource.NewQuantity(gpuMemory(spec)<<20, resource.BinarySI)}},
	}
}

// publish creates node's ResourceSlices.
func (n *Nodes) publish(ctx context.Context, m *machine, node *corev1.Node) error {
	for _, s := range resourceSlices(m, node) {
		if _, err := n.client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("publish ResourceSlice %s: %w", s.Name, err)
		}
	}
	return nil
}

// InstallDeviceClasses creates the driver's DeviceClasses, leaving any that
// exist.
func (c *Cluster) InstallDeviceClasses(ctx context.Context) error {
	for _, dc := range DeviceClasses() {
		if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create DeviceClass %s: %w", dc.Name, err)
		}
	}
	return nil
}

// startClaimController runs kube-controller-manager's ResourceClaim
// controller for the cluster, once: it makes claims from pods' templates,
// and releases and deletes them when their pods end.
func (c *Cluster) startClaimController(ctx context.Context) error {
	c.claimOnce.Do(func() {
		factory := informers.NewSharedInformerFactory(c.Client, 0)
		ctrl, err := resourceclaim.NewController(klog.Background(), c.Client, factory.Core().V1().Pods(),
			factory.Scheduling().V1beta1().PodGroups(), factory.Resource().V1().ResourceClaims(), factory.Resource().V1().ResourceClaimTemplates())
		if err != nil {
			c.claimErr = fmt.Errorf("ResourceClaim controller: %w", err)
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		factory.Start(ctx.Done())
		wg.Add(1)
		go func() { defer wg.Done(); ctrl.Run(ctx, 4) }()
		c.onStop(func() { cancel(); wg.Wait(); factory.Shutdown() })
	})
	return c.claimErr
}

// podClaims are the names of the ResourceClaims pod uses: its own (named,
// or made from a template and recorded in its status) and the one the
// scheduler made for extended resources served through DRA. ok is false
// while a template's claim is not recorded yet.
func podClaims(pod *corev1.Pod) (names []string, ok bool) {
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			names = append(names, *pc.ResourceClaimName)
			continue
		}
		found := false
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == pc.Name {
				found = true
				if st.ResourceClaimName != nil {
					names = append(names, *st.ResourceClaimName)
				}
			}
		}
		if !found {
			return nil, false
		}
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		names = append(names, st.ResourceClaimName)
	}
	return names, true
}

// draDevices are the devices of this driver on node that pod's claims were
// allocated, as the kubelet hands them to the plugin: every claim must be
// allocated and reserved for the pod, or the pod waits.
func (n *Nodes) draDevices(ctx context.Context, pod *corev1.Pod) (gpus []int, mig []string, claims []*resourcev1.ResourceClaim, err error) {
	names, ok := podClaims(pod)
	if !ok {
		return nil, nil, nil, fmt.Errorf("pod %s/%s: ResourceClaim not created yet", pod.Namespace, pod.Name)
	}
	for _, name := range names {
		claim, err := n.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, nil, err
		}
		if claim.Status.Allocation == nil || !dra.ReservedFor(claim, string(pod.UID)) {
			return nil, nil, nil, fmt.Errorf("ResourceClaim %s/%s: not allocated and reserved for pod %s", claim.Namespace, claim.Name, pod.Name)
		}
		claims = append(claims, claim)
		for _, a := range dra.AllocatedDevices(claim) {
			if a.Key.Driver != dra.Driver || a.Key.Pool != pod.Spec.NodeName {
				continue
			}
			i, ok := gpuIndex(a.Key.Device)
			switch {
			case !ok:
				return nil, nil, nil, fmt.Errorf("ResourceClaim %s/%s: device %s is not one this driver publishes", claim.Namespace, claim.Name, a.Key.Device)
			case strings.Contains(a.Key.Device, "-mig-"):
				mig = append(mig, a.Key.Device)
			default:
				gpus = append(gpus, i)
			}
		}
	}
	return gpus, mig, claims, nil
}

// markPrepared records in each claim's status that this driver's devices
// in it are ready (ready true) or no longer prepared (ready false: the
// entries are dropped), as the kubelet plugin reports device status.
func (n *Nodes) markPrepared(ctx context.Context, namespace string, claimNames []string, node string, ready bool) error {
	for _, name := range claimNames {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			claim, err := n.client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			var keep []resourcev1.AllocatedDeviceStatus
			for _, d := range claim.Status.Devices {
				if d.Driver != dra.Driver || d.Pool != node {
					keep = append(keep, d)
				}
			}
			if ready {
				for _, a := range dra.AllocatedDevices(claim) {
					if a.Key.Driver == dra.Driver && a.Key.Pool == node {
						keep = append(keep, resourcev1.AllocatedDeviceStatus{Driver: a.Key.Driver, Pool: a.Key.Pool, Device: a.Key.Device,
							Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared",
								Message: "device prepared for the pod", LastTransitionTime: metav1.Now(), ObservedGeneration: claim.Generation}}})
					}
				}
			}
			if len(keep) == len(claim.Status.Devices) && !ready {
				return nil
			}
			claim.Status.Devices = keep
			_, err = n.client.ResourceV1().ResourceClaims(namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
			return err
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsInvalid(err) {
			return fmt.Errorf("ResourceClaim %s/%s: device status: %w", namespace, name, err)
		}
	}
	return nil
}
