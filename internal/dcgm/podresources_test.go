package dcgm

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/schedloop/schedloop"
)

// kubeletPodResources serves the real PodResourcesLister gRPC service with a
// fixed List answer, as the kubelet would on its socket.
type kubeletPodResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	resp *podresourcesv1.ListPodResourcesResponse
}

func (k *kubeletPodResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return k.resp, nil
}

// servePodResources starts the service on a unix socket in a short temp dir
// (socket paths are limited to ~108 bytes) and returns the socket path.
func servePodResources(t *testing.T, resp *podresourcesv1.ListPodResourcesResponse) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "podres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kubelet.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, &kubeletPodResources{resp: resp})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return sock
}

const (
	uuidA = "GPU-eb3b2cf0-1471-d880-05ac-be262597cd77"
	uuidB = "GPU-90af5456-34ea-6486-a3e0-c5a820764417"
	uuidC = "GPU-e1c5f8a2-0000-1111-2222-333344445555"
)

func kubeletAnswer() *podresourcesv1.ListPodResourcesResponse {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Name: "job-a-0", Namespace: "ml", Containers: []*podresourcesv1.ContainerResources{
			{Name: "trainer", Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: "nvidia.com/gpu", DeviceIds: []string{uuidA}},
				{ResourceName: "example.com/nic", DeviceIds: []string{"nic-0"}},
			}},
			{Name: "sidecar"},
		}},
		// Time-slicing: two pods hold replicas of the same GPU.
		{Name: "infer-1", Namespace: "team-a", Containers: []*podresourcesv1.ContainerResources{
			{Name: "server", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{uuidB + "::0"}}}},
		}},
		{Name: "infer-2", Namespace: "team-b", Containers: []*podresourcesv1.ContainerResources{
			{Name: "server", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{uuidB + "::3"}}}},
		}},
		{Name: "small-0", Namespace: "ml", Containers: []*podresourcesv1.ContainerResources{
			{Name: "worker", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/mig-3g.40gb", DeviceIds: []string{"MIG-5f3a7c1e-aaaa-bbbb-cccc-ddddeeeeffff"}}}},
		}},
	}}
}

func TestPodResourcesGPUOwners(t *testing.T) {
	p, err := DialPodResources(servePodResources(t, kubeletAnswer()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	owners, err := p.GPUOwners(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]PodRef{
		uuidA: {{"ml", "job-a-0", "trainer"}},
		uuidB: {{"team-a", "infer-1", "server"}, {"team-b", "infer-2", "server"}},
		"MIG-5f3a7c1e-aaaa-bbbb-cccc-ddddeeeeffff": {{"ml", "small-0", "worker"}},
	}
	if len(owners) != len(want) {
		t.Fatalf("owners = %v, want %v", owners, want)
	}
	for id, refs := range want {
		if !slices.Equal(owners[id], refs) {
			t.Errorf("owners[%s] = %v, want %v", id, owners[id], refs)
		}
	}
}

func TestAttributedSource(t *testing.T) {
	p, err := DialPodResources(servePodResources(t, kubeletAnswer()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	src := sourceFunc(func(context.Context) ([]schedloop.GPUSample, error) {
		return []schedloop.GPUSample{
			{GPUUUID: uuidA, GPUUtil: 90},
			{GPUUUID: uuidB, GPUUtil: 40},
			{GPUUUID: uuidC, GPUUtil: 0},
			// Already attributed by the exporter: left alone.
			{GPUUUID: uuidA, PodNamespace: "x", PodName: "y", Container: "z"},
		}, nil
	})
	got, err := (&AttributedSource{Source: src, Owners: p}).Collect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []schedloop.GPUSample{
		{GPUUUID: uuidA, GPUUtil: 90, PodNamespace: "ml", PodName: "job-a-0", Container: "trainer"},
		{GPUUUID: uuidB, GPUUtil: 40, PodNamespace: "team-a", PodName: "infer-1", Container: "server"},
		{GPUUUID: uuidB, GPUUtil: 40, PodNamespace: "team-b", PodName: "infer-2", Container: "server"},
		{GPUUUID: uuidC},
		{GPUUUID: uuidA, PodNamespace: "x", PodName: "y", Container: "z"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestAttributedSourceKubeletDown(t *testing.T) {
	dir, err := os.MkdirTemp("", "podres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p, err := DialPodResources(filepath.Join(dir, "absent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	in := []schedloop.GPUSample{{GPUUUID: uuidA}}
	srcErr := errors.New("one exporter down")
	got, err := (&AttributedSource{Source: sourceFunc(func(context.Context) ([]schedloop.GPUSample, error) { return in, srcErr }), Owners: p}).Collect(t.Context())
	if !slices.Equal(got, in) {
		t.Errorf("samples = %v, want them unattributed %v", got, in)
	}
	if !errors.Is(err, srcErr) || err == nil || !strings.Contains(err.Error(), "absent.sock") {
		t.Errorf("error %v, want both the source's error and the socket named", err)
	}
}

type sourceFunc func(context.Context) ([]schedloop.GPUSample, error)

func (f sourceFunc) Collect(ctx context.Context) ([]schedloop.GPUSample, error) { return f(ctx) }

// instanceSource is a Source that names its MIG instances' device IDs, as
// the go-dcgm source does.
type instanceSource struct {
	samples []schedloop.GPUSample
	devices map[InstanceKey]string
}

func (s instanceSource) Collect(context.Context) ([]schedloop.GPUSample, error) {
	return s.samples, nil
}
func (s instanceSource) InstanceDeviceIDs() map[InstanceKey]string { return s.devices }

// The kubelet names a MIG instance by its MIG- UUID: the instance whose
// device ID the source knows goes to the pod holding that device; another
// instance of the same GPU, and the GPU itself, stay without a pod.
func TestAttributedSourceMIGInstance(t *testing.T) {
	p, err := DialPodResources(servePodResources(t, kubeletAnswer()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	src := instanceSource{
		samples: []schedloop.GPUSample{
			{GPUUUID: uuidC, GrEngineActive: 0.5},
			{GPUUUID: uuidC, GPUInstance: "1", GPUInstanceProfile: "3g.40gb", ComputeShare: 3.0 / 7, GrEngineActive: 0.9},
			{GPUUUID: uuidC, GPUInstance: "2", GPUInstanceProfile: "3g.40gb", ComputeShare: 3.0 / 7, GrEngineActive: 0.1},
		},
		devices: map[InstanceKey]string{{uuidC, "1"}: "MIG-5f3a7c1e-aaaa-bbbb-cccc-ddddeeeeffff"},
	}
	got, err := (&AttributedSource{Source: src, Owners: p}).Collect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(src.samples)
	want[1].PodNamespace, want[1].PodName, want[1].Container = "ml", "small-0", "worker"
	if !slices.Equal(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// A MIG instance handed out through DRA is joined to the claim's pod by
// the MIG UUID dcgm-exporter names it by (dra_mig_device_uuid), where no
// source maps the instance: a sample without pod labels gets the pod, one
// the exporter already named keeps it, and an instance named by no UUID,
// with no source map, stays without a pod.
func TestAttributeByDRAMIGUUID(t *testing.T) {
	const migA, migB = "MIG-1b2c3d4e-5f60-5718-9a0b-1c2d3e4f5a6b", "MIG-2c3d4e5f-6071-5829-ab1c-2d3e4f5a6b7c"
	samples := []schedloop.GPUSample{
		{GPUUUID: uuidC, GPUInstance: "3", GPUInstanceProfile: "1g.10gb", ComputeShare: 1.0 / 7, MIGDeviceUUID: migA},
		{GPUUUID: uuidC, GPUInstance: "4", GPUInstanceProfile: "3g.40gb", ComputeShare: 3.0 / 7, MIGDeviceUUID: migB,
			PodNamespace: "ml", PodName: "seen-by-exporter", Container: "c"},
		{GPUUUID: uuidC, GPUInstance: "5", GPUInstanceProfile: "2g.20gb", ComputeShare: 2.0 / 7},
		{GPUUUID: uuidC},
	}
	owners := map[string][]PodRef{
		migA:  {{Namespace: "default", Name: "pod1", Container: "ctr1"}},
		migB:  {{Namespace: "ml", Name: "other", Container: "c"}},
		uuidC: {{Namespace: "ml", Name: "whole-gpu-holder", Container: "c"}},
	}
	got := Attribute(slices.Clone(samples), owners, nil)
	want := slices.Clone(samples)
	want[0].PodNamespace, want[0].PodName, want[0].Container = "default", "pod1", "ctr1"
	want[3].PodNamespace, want[3].PodName, want[3].Container = "ml", "whole-gpu-holder", "c"
	if !slices.Equal(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}
