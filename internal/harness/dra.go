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
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/dra"
	"github.com/schedloop/schedloop/internal/harness/exporter"
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

// migDeviceName follows the driver's gpu-<minor>-mig-...; the instance is
// named by its profile and GPU instance id, the simulation having no NVML
// profile ids or placements.
func migDeviceName(gpu int, in migInstance) string {
	return fmt.Sprintf("gpu-%d-mig-%s-%s", gpu, strings.ReplaceAll(in.profile, ".", ""), in.id)
}

// computeSlices is the counter each partitioned GPU offers and each of its
// instances draws on: its MIG compute slices.
const computeSlices = "compute-slices"

// resourceSlices are the slices the driver publishes for m: one of its
// whole GPUs and, where the node has MIG instances (on partitioned GPUs
// beside the whole ones, mig.go), counter slices holding each partitioned
// GPU's compute slices (eight GPUs each, the API's limit) and one slice per
// partitioned GPU holding its instances, each drawing its slices from its
// GPU's counters, as partitionable devices do. It also fills m.migDevice.
func resourceSlices(m *machine, node *corev1.Node) []*resourcev1.ResourceSlice {
	spec := m.spec
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
	if spec.GPUs > 0 {
		s := mk(spec.Name + "-" + dra.Driver)
		for i := range spec.GPUs {
			s.Spec.Devices = append(s.Spec.Devices, gpuDevice(m, node, i, m.uuid[i]))
		}
		out = append(out, s)
	}
	total := int64(schedloop.MIGSlices(modelName(spec.GPUModel)))
	for first := 0; first < len(m.partUUID); first += resourcev1.ResourceSliceMaxCounterSets {
		s := mk(fmt.Sprintf("%s-%s-counters-%d", spec.Name, dra.Driver, first/resourcev1.ResourceSliceMaxCounterSets))
		for p := first; p < min(first+resourcev1.ResourceSliceMaxCounterSets, len(m.partUUID)); p++ {
			s.Spec.SharedCounters = append(s.Spec.SharedCounters, resourcev1.CounterSet{Name: counterSet(spec.GPUs + p),
				Counters: map[string]resourcev1.Counter{computeSlices: {Value: *resource.NewQuantity(total, resource.DecimalSI)}}})
		}
		out = append(out, s)
	}
	m.migDevice = map[string]int{}
	for p, parent := range m.partUUID {
		index := spec.GPUs + p
		s := mk(fmt.Sprintf("%s-%s-gpu-%d", spec.Name, dra.Driver, index))
		for i, in := range m.mig {
			if in.part != p {
				continue
			}
			d := gpuDevice(m, node, index, migUUID(parent, in))
			d.Name = migDeviceName(index, in)
			d.Attributes[dra.AttrType] = resourcev1.DeviceAttribute{StringValue: ptr.To(dra.TypeMIG)}
			d.Attributes[dra.AttrParentUUID] = resourcev1.DeviceAttribute{StringValue: ptr.To(parent)}
			d.Attributes[dra.AttrProfile] = resourcev1.DeviceAttribute{StringValue: ptr.To(in.profile)}
			d.Capacity[dra.CapMemory] = resourcev1.DeviceCapacity{Value: *resource.NewQuantity(gpuMemory(spec)<<20*int64(in.slices)/total, resource.BinarySI)}
			d.ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: counterSet(index),
				Counters: map[string]resourcev1.Counter{computeSlices: {Value: *resource.NewQuantity(int64(in.slices), resource.DecimalSI)}}}}
			s.Spec.Devices = append(s.Spec.Devices, d)
			m.migDevice[d.Name] = i
		}
		out = append(out, s)
	}
	for _, s := range out {
		s.Spec.Pool.ResourceSliceCount = int64(len(out))
	}
	return out
}

// draDevice is how dcgm-exporter with DRA names device on node held by
// r: its claim and the allocation's driver, pool and device; nil when no
// claim of r holds it.
func draDevice(r *podRun, key, node, device string) *exporter.DRADevice {
	claim, ok := r.claimOf[device]
	if !ok {
		return nil
	}
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	return &exporter.DRADevice{ClaimName: claim, ClaimNamespace: ns, Driver: dra.Driver, Pool: node, Device: device}
}

func counterSet(gpu int) string { return "gpu-" + strconv.Itoa(gpu) + "-counter-set" }

// LabelGPUClique is GPU feature discovery's label of a node's NVLink
// clique.
const LabelGPUClique = "nvidia.com/gpu.clique"

// gpuDevice is GPU i of m, of the given UUID, with the attributes NVIDIA's driver publishes:
// type, uuid, productName, pcieBusID and memory, the standard NUMA node and
// PCIe root (two GPUs per PCIe switch, half the GPUs per socket), and the
// NVLink clique from the node's clique label (LabelGPUClique) or else its
// NVLink-domain label, where it has one.
func gpuDevice(m *machine, node *corev1.Node, i int, uuid string) resourcev1.Device {
	spec := m.spec
	numa, all := int64(0), spec.GPUs+len(m.partUUID)
	if all > 1 {
		numa = int64(i / ((all + 1) / 2))
	}
	attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		dra.AttrType:        {StringValue: ptr.To(dra.TypeGPU)},
		dra.AttrUUID:        {StringValue: ptr.To(uuid)},
		dra.AttrProductName: {StringValue: ptr.To(modelName(spec.GPUModel))},
		dra.AttrPCIeBusID:   {StringValue: ptr.To(fmt.Sprintf("0000:%02x:00.0", 0x18+i*0x10))},
		dra.AttrNUMANode:    {IntValue: ptr.To(numa)},
		dra.AttrPCIeRoot:    {StringValue: ptr.To(fmt.Sprintf("pci0000:%02x", 0x10+(i/2)*0x20))},
	}
	clique := node.Labels[LabelGPUClique]
	if clique == "" {
		clique = node.Labels[trace.LabelNVLinkDomain]
	}
	if clique != "" {
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
// allocated, as the kubelet hands them to the plugin, and the claim that
// holds each, by device name: every claim must be allocated and reserved
// for the pod, or the pod waits.
func (n *Nodes) draDevices(ctx context.Context, m *machine, pod *corev1.Pod) (gpus, mig []int, claims []*resourcev1.ResourceClaim, claimOf map[string]string, err error) {
	names, ok := podClaims(pod)
	if !ok {
		return nil, nil, nil, nil, fmt.Errorf("pod %s/%s: ResourceClaim not created yet", pod.Namespace, pod.Name)
	}
	for _, name := range names {
		claim, err := n.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, nil, nil, err
		}
		if claim.Status.Allocation == nil || !dra.ReservedFor(claim, string(pod.UID)) {
			return nil, nil, nil, nil, fmt.Errorf("ResourceClaim %s/%s: not allocated and reserved for pod %s", claim.Namespace, claim.Name, pod.Name)
		}
		claims = append(claims, claim)
		for _, a := range dra.AllocatedDevices(claim) {
			if a.Key.Driver != dra.Driver || a.Key.Pool != pod.Spec.NodeName {
				continue
			}
			if claimOf == nil {
				claimOf = map[string]string{}
			}
			claimOf[a.Key.Device] = claim.Name
			if in, ok := m.migDevice[a.Key.Device]; ok {
				mig = append(mig, in)
				continue
			}
			i, ok := gpuIndex(a.Key.Device)
			if !ok || i >= m.spec.GPUs {
				return nil, nil, nil, nil, fmt.Errorf("ResourceClaim %s/%s: device %s is not one this driver publishes on %s", claim.Namespace, claim.Name, a.Key.Device, m.spec.Name)
			}
			gpus = append(gpus, i)
		}
	}
	return gpus, mig, claims, claimOf, nil
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

// gpuIndex is the whole GPU a device name of this driver names.
func gpuIndex(device string) (int, bool) {
	rest, ok := strings.CutPrefix(device, "gpu-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// holdMIG gives the pod key the MIG instances its claims were allocated,
// or none if one is held already (the allocator and the runner disagree).
func (m *machine) holdMIG(key string, instances []int) ([]int, error) {
	for _, i := range instances {
		if h := m.mig[i].holder; h != "" && h != key {
			return nil, fmt.Errorf("MIG instance %s of %s is held by %s", m.mig[i].id, m.spec.Name, h)
		}
	}
	for _, i := range instances {
		m.mig[i].holder = key
	}
	return instances, nil
}
