package dcgm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/schedloop/schedloop"
)

// DefaultPodResourcesSocket is where the kubelet serves the pod-resources API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// maxPodResourcesMsgSize matches the kubelet's own client limit (16 MiB): a
// node with hundreds of pods answers with one large List message.
const maxPodResourcesMsgSize = 16 << 20

// PodRef names the container a GPU is allocated to.
type PodRef struct {
	Namespace string
	Name      string
	Container string
}

// PodResources reads GPU allocations from the kubelet's pod-resources API.
// It sees only its own node, so the collector runs it next to the kubelet
// (a DaemonSet with the socket mounted).
type PodResources struct {
	conn   *grpc.ClientConn
	client podresourcesv1.PodResourcesListerClient
}

// DialPodResources connects to the pod-resources socket. The connection is
// made lazily; errors surface on the first GPUOwners call.
func DialPodResources(socket string) (*PodResources, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxPodResourcesMsgSize)),
	)
	if err != nil {
		return nil, fmt.Errorf("pod-resources client for %s: %w", socket, err)
	}
	return &PodResources{conn: conn, client: podresourcesv1.NewPodResourcesListerClient(conn)}, nil
}

// Close closes the connection.
func (p *PodResources) Close() error { return p.conn.Close() }

// GPUOwners maps each allocated GPU device ID (a GPU or MIG UUID) to the
// containers holding it. A GPU shared by time-slicing has several owners.
func (p *PodResources) GPUOwners(ctx context.Context) (map[string][]PodRef, error) {
	resp, err := p.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list kubelet pod resources at %s: %w", p.conn.Target(), err)
	}
	return gpuOwners(resp), nil
}

// isGPUResource matches whole GPUs and MIG slices as the NVIDIA device plugin
// names them.
func isGPUResource(name string) bool {
	return name == schedloop.GPUResourceName || strings.HasPrefix(name, "nvidia.com/mig-")
}

func gpuOwners(resp *podresourcesv1.ListPodResourcesResponse) map[string][]PodRef {
	owners := map[string][]PodRef{}
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			ref := PodRef{Namespace: pod.GetNamespace(), Name: pod.GetName(), Container: c.GetName()}
			for _, d := range c.GetDevices() {
				if !isGPUResource(d.GetResourceName()) {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					// Time-slicing replicas are advertised as "<uuid>::<n>".
					id, _, _ = strings.Cut(id, "::")
					if !slices.Contains(owners[id], ref) {
						owners[id] = append(owners[id], ref)
					}
				}
			}
		}
	}
	for id := range owners {
		slices.SortFunc(owners[id], func(a, b PodRef) int {
			return strings.Compare(a.Namespace+"/"+a.Name+"/"+a.Container, b.Namespace+"/"+b.Name+"/"+b.Container)
		})
	}
	return owners
}

// InstanceKey names a MIG instance: its GPU's UUID and its GPU_I_ID.
type InstanceKey struct{ GPUUUID, Instance string }

// InstanceDevicer is a Source that knows the device ID the kubelet names
// each MIG instance by: the device plugin allocates an instance under its
// own MIG- UUID, not its GPU's.
type InstanceDevicer interface {
	InstanceDeviceIDs() map[InstanceKey]string
}

// Attribute fills the pod of samples that carry none from owners (device ID
// → containers). A sample whose GPU has several owners is repeated once per
// owner, as dcgm-exporter does for shared GPUs. Samples that already name a
// pod are kept as they are: the exporter saw the allocation first-hand. A
// MIG instance's sample is looked up by the instance's device ID: the MIG
// UUID the sample names (MIGDeviceUUID), else the one instances gives; one
// whose ID is unknown stays without a pod, since the GPU's UUID names the
// whole GPU, which no pod holds while it is partitioned.
func Attribute(samples []schedloop.GPUSample, owners map[string][]PodRef, instances map[InstanceKey]string) []schedloop.GPUSample {
	out := make([]schedloop.GPUSample, 0, len(samples))
	for _, s := range samples {
		id := s.GPUUUID
		if s.GPUInstance != "" {
			id = s.MIGDeviceUUID
			if id == "" {
				id = instances[InstanceKey{s.GPUUUID, s.GPUInstance}]
			}
		}
		var refs []PodRef
		if id != "" {
			refs = owners[id]
		}
		if s.PodName != "" || len(refs) == 0 {
			out = append(out, s)
			continue
		}
		for _, r := range refs {
			s.PodNamespace, s.PodName, s.Container = r.Namespace, r.Name, r.Container
			out = append(out, s)
		}
	}
	return out
}

// GPUOwnerLister is what AttributedSource needs from PodResources.
type GPUOwnerLister interface {
	GPUOwners(ctx context.Context) (map[string][]PodRef, error)
}

// AttributedSource attributes the samples of Source through Owners. If the
// owners cannot be listed, the samples are returned unattributed with the
// error: telemetry without a pod is still worth storing.
type AttributedSource struct {
	Source Source
	Owners GPUOwnerLister
}

// Collect implements Source.
func (a *AttributedSource) Collect(ctx context.Context) ([]schedloop.GPUSample, error) {
	samples, srcErr := a.Source.Collect(ctx)
	owners, err := a.Owners.GPUOwners(ctx)
	if err != nil {
		return samples, errors.Join(srcErr, fmt.Errorf("attribute GPUs to pods: %w", err))
	}
	var instances map[InstanceKey]string
	if d, ok := a.Source.(InstanceDevicer); ok {
		instances = d.InstanceDeviceIDs()
	}
	return Attribute(samples, owners, instances), srcErr
}
