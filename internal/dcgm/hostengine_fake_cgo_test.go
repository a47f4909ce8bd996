//go:build cgo

package dcgm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	godcgm "github.com/NVIDIA/go-dcgm/pkg/dcgm"

	"github.com/schedloop/schedloop"
)

// fakeDCGM stands in for go-dcgm (dcgmAPI) with what a node's DCGM would
// report, read from a testdata/hostengine file: its GPUs, its MIG hierarchy,
// the string fields of its GPU instances and the latest values of the
// watched fields. A field the file gives no value for reads as DCGM's blank,
// as an unsupported profiling field does.
type fakeDCGM struct {
	GPUs []struct {
		ID    uint   `json:"id"`
		UUID  string `json:"uuid"`
		Model string `json:"model"`
	} `json:"gpus"`
	Hierarchy []struct {
		Group       string `json:"group"`
		ID          uint   `json:"id"`
		ParentGroup string `json:"parent_group"`
		ParentID    uint   `json:"parent_id"`
		GPUUUID     string `json:"gpu_uuid"`
		InstanceID  uint   `json:"instance_id"`
		Slices      uint   `json:"slices"`
	} `json:"hierarchy"`
	// Strings and Values are keyed by entity ("GPU/0", "GPU_I/3"), then
	// by DCGM field name.
	Strings map[string]map[string]string  `json:"strings"`
	Values  map[string]map[string]float64 `json:"values"`
	TSMicro int64                         `json:"ts_micro"`

	// What the host engine asked of it.
	groupEntities []string
	destroyed     int
}

var fakeGroups = map[string]godcgm.Field_Entity_Group{"GPU": godcgm.FE_GPU, "GPU_I": godcgm.FE_GPU_I, "GPU_CI": godcgm.FE_GPU_CI}

var fakeFields = map[godcgm.Short]struct {
	name string
	typ  uint
}{
	godcgm.DCGM_FI_DEV_GPU_UTIL:          {"DCGM_FI_DEV_GPU_UTIL", godcgm.DCGM_FT_INT64},
	godcgm.DCGM_FI_PROF_GR_ENGINE_ACTIVE: {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", godcgm.DCGM_FT_DOUBLE},
	godcgm.DCGM_FI_PROF_SM_ACTIVE:        {"DCGM_FI_PROF_SM_ACTIVE", godcgm.DCGM_FT_DOUBLE},
	godcgm.DCGM_FI_DEV_FB_USED:           {"DCGM_FI_DEV_FB_USED", godcgm.DCGM_FT_INT64},
	godcgm.DCGM_FI_DEV_POWER_USAGE:       {"DCGM_FI_DEV_POWER_USAGE", godcgm.DCGM_FT_DOUBLE},
	godcgm.DCGM_FI_DEV_NAME:              {"DCGM_FI_DEV_NAME", godcgm.DCGM_FT_STRING},
	godcgm.DCGM_FI_DEV_UUID:              {"DCGM_FI_DEV_UUID", godcgm.DCGM_FT_STRING},
}

func fakeEntity(g godcgm.Field_Entity_Group, id uint) string {
	for name, v := range fakeGroups {
		if v == g {
			return fmt.Sprintf("%s/%d", name, id)
		}
	}
	return fmt.Sprintf("%d/%d", g, id)
}

// fakeValue is what DCGM returns for field of entity: the file's value,
// else the blank of the field's type; the bytes laid out as go-dcgm reads
// them.
func (f *fakeDCGM) fakeValue(entity string, field godcgm.Short) (typ uint, value [4096]byte) {
	def := fakeFields[field]
	switch def.typ {
	case godcgm.DCGM_FT_STRING:
		copy(value[:], f.Strings[entity][def.name])
	case godcgm.DCGM_FT_INT64:
		v, ok := f.Values[entity][def.name]
		i := int64(v)
		if !ok {
			i = godcgm.DCGM_FT_INT64_BLANK
		}
		binary.NativeEndian.PutUint64(value[:], uint64(i))
	case godcgm.DCGM_FT_DOUBLE:
		v, ok := f.Values[entity][def.name]
		if !ok {
			v = godcgm.DCGM_FT_FP64_BLANK
		}
		binary.NativeEndian.PutUint64(value[:], math.Float64bits(v))
	}
	return def.typ, value
}

func (f *fakeDCGM) GetSupportedDevices() ([]uint, error) {
	var ids []uint
	for _, g := range f.GPUs {
		ids = append(ids, g.ID)
	}
	return ids, nil
}

func (f *fakeDCGM) GetDeviceInfo(id uint) (godcgm.Device, error) {
	for _, g := range f.GPUs {
		if g.ID == id {
			return godcgm.Device{GPU: id, UUID: g.UUID, Identifiers: godcgm.DeviceIdentifiers{Model: g.Model}}, nil
		}
	}
	return godcgm.Device{}, fmt.Errorf("no GPU %d", id)
}

func (f *fakeDCGM) GetGPUInstanceHierarchy() (godcgm.MigHierarchy_v2, error) {
	var h godcgm.MigHierarchy_v2
	for i, e := range f.Hierarchy {
		h.EntityList[i] = godcgm.MigHierarchyInfo_v2{
			Entity: godcgm.GroupEntityPair{EntityGroupId: fakeGroups[e.Group], EntityId: e.ID},
			Parent: godcgm.GroupEntityPair{EntityGroupId: fakeGroups[e.ParentGroup], EntityId: e.ParentID},
			Info:   godcgm.MigEntityInfo{GpuUuid: e.GPUUUID, NvmlInstanceId: e.InstanceID, NvmlProfileSlices: e.Slices},
		}
	}
	h.Count = uint(len(f.Hierarchy))
	return h, nil
}

func (f *fakeDCGM) EntitiesGetLatestValues(entities []godcgm.GroupEntityPair, fields []godcgm.Short, _ uint) ([]godcgm.FieldValue_v2, error) {
	var out []godcgm.FieldValue_v2
	for _, e := range entities {
		for _, field := range fields {
			typ, value := f.fakeValue(fakeEntity(e.EntityGroupId, e.EntityId), field)
			out = append(out, godcgm.FieldValue_v2{EntityGroupId: e.EntityGroupId, EntityID: e.EntityId, FieldID: field,
				FieldType: typ, TS: f.TSMicro, Value: value})
		}
	}
	return out, nil
}

func (f *fakeDCGM) EntityGetLatestValues(g godcgm.Field_Entity_Group, id uint, fields []godcgm.Short) ([]godcgm.FieldValue_v1, error) {
	var out []godcgm.FieldValue_v1
	for _, field := range fields {
		typ, value := f.fakeValue(fakeEntity(g, id), field)
		out = append(out, godcgm.FieldValue_v1{FieldID: field, FieldType: typ, TS: f.TSMicro, Value: value})
	}
	return out, nil
}

func (f *fakeDCGM) FieldGroupCreate(string, []godcgm.Short) (godcgm.FieldHandle, error) {
	return godcgm.FieldHandle{}, nil
}
func (f *fakeDCGM) FieldGroupDestroy(godcgm.FieldHandle) error { f.destroyed++; return nil }
func (f *fakeDCGM) WatchFieldsWithGroupEx(godcgm.FieldHandle, godcgm.GroupHandle, int64, float64, int32) error {
	return nil
}
func (f *fakeDCGM) GroupAllGPUs() godcgm.GroupHandle               { return godcgm.GroupHandle{} }
func (f *fakeDCGM) CreateGroup(string) (godcgm.GroupHandle, error) { return godcgm.GroupHandle{}, nil }
func (f *fakeDCGM) AddEntityToGroup(_ godcgm.GroupHandle, g godcgm.Field_Entity_Group, id uint) error {
	f.groupEntities = append(f.groupEntities, fakeEntity(g, id))
	return nil
}
func (f *fakeDCGM) DestroyGroup(godcgm.GroupHandle) error { f.destroyed++; return nil }

// exporterPage is the page dcgm-exporter would print of samples: one
// engine-active series each, with the labels it gives a GPU and, on an
// instance, GPU_I_ID, GPU_I_PROFILE and the MIG UUID it prints for a
// claimed instance.
func (f *fakeDCGM) exporterPage(samples []schedloop.GPUSample) []byte {
	var b bytes.Buffer
	for _, s := range samples {
		model := ""
		for _, g := range f.GPUs {
			if g.UUID == s.GPUUUID {
				model = g.Model
			}
		}
		fmt.Fprintf(&b, "%s{gpu=\"%d\",UUID=%q,modelName=%q,Hostname=%q", MetricGrEngineActive, s.GPUIndex, s.GPUUUID, model, s.Node)
		if s.GPUInstance != "" {
			fmt.Fprintf(&b, ",GPU_I_PROFILE=%q,GPU_I_ID=%q", s.GPUInstanceProfile, s.GPUInstance)
		}
		if s.MIGDeviceUUID != "" {
			fmt.Fprintf(&b, ",dra_mig_device_uuid=%q", s.MIGDeviceUUID)
		}
		fmt.Fprintf(&b, "} %g\n", s.GrEngineActive)
	}
	return b.Bytes()
}

// hostEngineResult is what a golden file holds: the host engine's samples
// and inventory after one Collect, the instances' device IDs, and the
// entities it watched apart from the whole GPUs.
type hostEngineResult struct {
	Samples         []schedloop.GPUSample
	Inventory       []schedloop.GPU
	InstanceDevices map[string]string
	WatchedEntities []string
	Error           string `json:",omitempty"`
}

// TestHostEngineGolden runs the go-dcgm source on fake DCGMs read from
// testdata/hostengine/*.json and compares what it reports with the .golden
// file beside each (-update rewrites them). A MIG instance, an entity
// (parent GPU UUID, GPU_I_ID), resolves to its own MIG- UUID, which its
// samples carry and the inventory stores, as the exporter path does with
// dra_mig_device_uuid.
func TestHostEngineGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/hostengine/*.json")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs under testdata/hostengine (%v)", err)
	}
	for _, in := range inputs {
		t.Run(strings.TrimSuffix(filepath.Base(in), ".json"), func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var fake fakeDCGM
			if err := json.Unmarshal(raw, &fake); err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			var res hostEngineResult
			h, err := startWith(HostEngineConfig{Node: "node-1"}, &fake, nil)
			if err != nil {
				t.Fatal(err)
			}
			h.SetInventory(func(gpus []schedloop.GPU) { res.Inventory = gpus })
			res.Samples, err = h.Collect(t.Context())
			if err != nil {
				res.Error = err.Error()
			}
			res.InstanceDevices = map[string]string{}
			for k, v := range h.InstanceDeviceIDs() {
				res.InstanceDevices[k.GPUUUID+"/"+k.Instance] = v
			}
			res.WatchedEntities = slices.Clone(fake.groupEntities)
			// The exporter path, given the page dcgm-exporter would print
			// of the same devices, must feed the inventory the same rows.
			set, err := newPageParser().parse(t.Context(), fake.exporterPage(res.Samples), contentTypeText, scrapeTime, Limits{})
			if err != nil {
				t.Fatalf("the exporter page of the same devices: %v", err)
			}
			// Order is no part of it: the inventory keys rows by device.
			byDevice := func(a, b schedloop.GPU) int {
				return strings.Compare(a.UUID+"/"+a.Instance, b.UUID+"/"+b.Instance)
			}
			viaExporter, viaDCGM := set.inventory(), slices.Clone(res.Inventory)
			slices.SortFunc(viaExporter, byDevice)
			slices.SortFunc(viaDCGM, byDevice)
			if !slices.Equal(viaExporter, viaDCGM) {
				t.Errorf("inventory\n from go-dcgm:    %+v\n from the exporter: %+v", res.Inventory, viaExporter)
			}
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(res, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := strings.TrimSuffix(in, ".json") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from %s:\n got: %s\nwant: %s", in, golden, got, want)
			}
		})
	}
}
