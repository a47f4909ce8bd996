//go:build cgo

package dcgm

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	godcgm "github.com/NVIDIA/go-dcgm/pkg/dcgm"
)

// These run on machines without DCGM (CI, laptops); on a GPU node with DCGM
// installed, StartHostEngine succeeds and the test checks it can collect.
func TestStartHostEngineWithoutDCGM(t *testing.T) {
	for _, cfg := range []HostEngineConfig{
		{Mode: Embedded, Node: "node-1"},
		{Mode: Standalone, Address: "localhost:5555", Node: "node-1"},
	} {
		t.Run(cfg.Mode.String(), func(t *testing.T) {
			h, err := StartHostEngine(cfg)
			if err == nil {
				defer h.Close()
				if _, err := h.Collect(t.Context()); err != nil {
					t.Errorf("DCGM is present but Collect failed: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrDCGMNotInstalled) {
				t.Fatalf("error %v does not wrap ErrDCGMNotInstalled", err)
			}
			want := "start DCGM (" + cfg.Mode.String() + " mode): DCGM is not installed on this node (libdcgm.so.4 not found): install datacenter-gpu-manager or use --dcgm-exporter-url to scrape dcgm-exporter instead"
			if err.Error() != want {
				t.Errorf("error\n got %q\nwant %q", err, want)
			}
			if !strings.Contains(err.Error(), ExporterFlagHint) {
				t.Errorf("error %q does not point to %s", err, ExporterFlagHint)
			}
		})
	}
}

// A MIG hierarchy as DCGM reports it (GPU instances, their compute
// instances, in no particular order) becomes one instance per GPU_I entity,
// under its GPU, named by NVML's instance id and its DCGM_FI_DEV_NAME; each
// collects as a sample of its own with the labels dcgm-exporter gives it.
func TestMIGInstancesFromTheHierarchy(t *testing.T) {
	gpus := []hostGPU{{id: 0, uuid: "GPU-a", model: "NVIDIA A100-SXM4-80GB"}, {id: 1, uuid: "GPU-b", model: "NVIDIA A100-SXM4-80GB"}}
	gi := func(entity, parent, nvmlID, slices uint, uuid string) godcgm.MigHierarchyInfo_v2 {
		return godcgm.MigHierarchyInfo_v2{Entity: godcgm.GroupEntityPair{EntityGroupId: godcgm.FE_GPU_I, EntityId: entity},
			Parent: godcgm.GroupEntityPair{EntityGroupId: godcgm.FE_GPU, EntityId: parent},
			Info:   godcgm.MigEntityInfo{GpuUuid: uuid, NvmlGpuIndex: parent, NvmlInstanceId: nvmlID, NvmlProfileSlices: slices}}
	}
	ci := godcgm.MigHierarchyInfo_v2{Entity: godcgm.GroupEntityPair{EntityGroupId: godcgm.FE_GPU_CI, EntityId: 0},
		Parent: godcgm.GroupEntityPair{EntityGroupId: godcgm.FE_GPU_I, EntityId: 0}, Info: godcgm.MigEntityInfo{GpuUuid: "GPU-b"}}
	entries := []godcgm.MigHierarchyInfo_v2{gi(0, 1, 1, 3, "GPU-b"), ci, gi(1, 1, 13, 1, ""), gi(2, 7, 2, 1, "GPU-gone")}
	got := migInstances(entries, gpus, map[uint]string{0: "3g.40gb"})
	if len(got) != 2 || got[0] != (hostInstance{entity: 0, gpu: gpus[1], id: "1", profile: "3g.40gb"}) ||
		got[1] != (hostInstance{entity: 1, gpu: gpus[1], id: "13", profile: "1g"}) {
		t.Fatalf("migInstances = %+v; want instance 1 (3g.40gb) and 13 (1g, named by its slices) of GPU-b, nothing of an unknown GPU", got)
	}

	h := &HostEngine{cfg: HostEngineConfig{Node: "node-1"}}
	set := newSampleSet(2)
	at := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		label labelFunc
		v     float64
	}{{h.labels(gpus[1], nil), 0.5}, {h.labels(got[0].gpu, &got[0]), 0.9}, {h.labels(got[1].gpu, &got[1]), 0.1}} {
		if err := set.add(MetricGrEngineActive, c.label, c.v, at); err != nil {
			t.Fatal(err)
		}
	}
	samples := set.sorted()
	if len(samples) != 3 {
		t.Fatalf("%d samples, want the GPU and its two instances: %+v", len(samples), samples)
	}
	for _, s := range samples {
		switch s.GPUInstance {
		case "":
			if s.GrEngineActive != 0.5 || s.ComputeShare != 0 {
				t.Errorf("whole GPU sample %+v", s)
			}
		case "1":
			if s.GPUUUID != "GPU-b" || s.GPUInstanceProfile != "3g.40gb" || math.Abs(s.ComputeShare-3.0/7) > 1e-9 || s.GrEngineActive != 0.9 || s.Node != "node-1" {
				t.Errorf("instance 1 sample %+v, want GPU-b's 3g.40gb at 3/7 of its compute", s)
			}
		case "13":
			if s.GPUInstanceProfile != "1g" || math.Abs(s.ComputeShare-1.0/7) > 1e-9 || s.GrEngineActive != 0.1 {
				t.Errorf("instance 13 sample %+v, want 1/7 of GPU-b", s)
			}
		default:
			t.Errorf("unexpected sample %+v", s)
		}
	}
}

// Only instances DCGM gave a MIG- UUID for are named to the attribution.
func TestHostEngineInstanceDeviceIDs(t *testing.T) {
	g := hostGPU{id: 0, uuid: "GPU-a"}
	h := &HostEngine{instances: []hostInstance{{gpu: g, id: "1", device: "MIG-1"}, {gpu: g, id: "2"}}}
	got := h.InstanceDeviceIDs()
	if len(got) != 1 || got[InstanceKey{"GPU-a", "1"}] != "MIG-1" {
		t.Errorf("InstanceDeviceIDs = %v, want instance 1 of GPU-a as MIG-1 alone", got)
	}
}
