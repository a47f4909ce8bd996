//go:build cgo

package dcgm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	godcgm "github.com/NVIDIA/go-dcgm/pkg/dcgm"

	"github.com/schedloop/schedloop"
)

// hostEngineFields are the DCGM field IDs of the five GPUSample values, in the
// order of hostEngineSetters.
var hostEngineFields = []godcgm.Short{
	godcgm.DCGM_FI_DEV_GPU_UTIL,
	godcgm.DCGM_FI_PROF_GR_ENGINE_ACTIVE,
	godcgm.DCGM_FI_PROF_SM_ACTIVE,
	godcgm.DCGM_FI_DEV_FB_USED,
	godcgm.DCGM_FI_DEV_POWER_USAGE,
}

var hostEngineMetric = map[godcgm.Short]string{
	godcgm.DCGM_FI_DEV_GPU_UTIL:          MetricGPUUtil,
	godcgm.DCGM_FI_PROF_GR_ENGINE_ACTIVE: MetricGrEngineActive,
	godcgm.DCGM_FI_PROF_SM_ACTIVE:        MetricSMActive,
	godcgm.DCGM_FI_DEV_FB_USED:           MetricFBUsed,
	godcgm.DCGM_FI_DEV_POWER_USAGE:       MetricPowerUsage,
}

// startMu serialises starts: go-dcgm keeps one process-wide connection.
var startMu sync.Mutex

// HostEngine is the go-dcgm source: it watches the five fields on every GPU
// of this node and reads their latest values on Collect. go-dcgm holds one
// connection per process, so run one HostEngine per process.
type HostEngine struct {
	cfg        HostEngineConfig
	cleanup    func()
	fieldGroup godcgm.FieldHandle
	gpus       []hostGPU
	// instances are the MIG GPU instances DCGM knows (FE_GPU_I entities),
	// watched through instanceGroup, which exists only when there are some.
	instances     []hostInstance
	instanceGroup *godcgm.GroupHandle
	closeOnce     sync.Once
	// api is go-dcgm, or a test's stand-in for it.
	api dcgmAPI
	// Inventory, when set, is told after each Collect the GPUs and MIG
	// instances it read, as ExporterScraper.Inventory is after each page.
	Inventory func(gpus []schedloop.GPU)
}

type hostGPU struct {
	id          uint
	uuid, model string
}

// hostInstance is one MIG GPU instance: its DCGM entity, its parent GPU and
// the names dcgm-exporter gives it (GPU_I_ID is NVML's instance id,
// GPU_I_PROFILE the instance's DCGM_FI_DEV_NAME, e.g. "1g.10gb").
type hostInstance struct {
	entity  uint
	gpu     hostGPU
	id      string
	profile string
	// device is the instance's MIG- UUID, the device ID the kubelet's
	// pod-resources API names it by; "" when DCGM did not give one.
	device string
}

// StartHostEngine loads libdcgm, connects in the configured mode and starts
// watching the fields. On a node without DCGM it fails with an error wrapping
// ErrDCGMNotInstalled that says what to install.
func StartHostEngine(cfg HostEngineConfig) (*HostEngine, error) {
	startMu.Lock()
	defer startMu.Unlock()

	var args []string
	if cfg.Mode == Standalone {
		addr := cfg.Address
		if addr == "" {
			addr = "localhost:5555"
		}
		args = []string{addr, "0"}
		if cfg.UnixSocket {
			args[1] = "1"
		}
	}
	mode := godcgm.Embedded
	if cfg.Mode == Standalone {
		mode = godcgm.Standalone
	}
	cleanup, err := godcgm.Init(mode, args...)
	if err != nil {
		// Init returns a nil cleanup on error: there is nothing to undo.
		if isLibraryMissing(err) {
			return nil, fmt.Errorf("start DCGM (%s mode): %w (%w): install datacenter-gpu-manager or use %s to scrape dcgm-exporter instead",
				cfg.Mode, ErrDCGMNotInstalled, err, ExporterFlagHint)
		}
		if cfg.Mode == Standalone {
			return nil, fmt.Errorf("start DCGM (standalone mode, nv-hostengine at %s): %w", args[0], err)
		}
		return nil, fmt.Errorf("start DCGM (%s mode): %w", cfg.Mode, err)
	}
	h, err := startWith(cfg, libDCGM{}, cleanup)
	if err != nil {
		cleanup()
		return nil, err
	}
	return h, nil
}

// startWith makes the host engine on a connected api and starts watching;
// cleanup is what Close calls last.
func startWith(cfg HostEngineConfig, api dcgmAPI, cleanup func()) (*HostEngine, error) {
	h := &HostEngine{cfg: cfg, cleanup: cleanup, api: api}
	if err := h.watch(); err != nil {
		return nil, err
	}
	return h, nil
}

// SetInventory implements InventoryReporter.
func (h *HostEngine) SetInventory(f func(gpus []schedloop.GPU)) { h.Inventory = f }

// isLibraryMissing recognises go-dcgm's dlopen failure, which it reports only
// as text ("libdcgm.so.4 not found").
func isLibraryMissing(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "libdcgm.so") && strings.Contains(msg, "not found")
}

func (h *HostEngine) watch() error {
	ids, err := h.api.GetSupportedDevices()
	if err != nil {
		return fmt.Errorf("list DCGM-supported GPUs: %w", err)
	}
	for _, id := range ids {
		dev, err := h.api.GetDeviceInfo(id)
		if err != nil {
			return fmt.Errorf("read DCGM device info of GPU %d: %w", id, err)
		}
		h.gpus = append(h.gpus, hostGPU{id: id, uuid: dev.UUID, model: dev.Identifiers.Model})
	}
	if err := h.findInstances(); err != nil {
		return err
	}
	name := "schedloop-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	h.fieldGroup, err = h.api.FieldGroupCreate(name, hostEngineFields)
	if err != nil {
		return fmt.Errorf("create DCGM field group %s: %w", name, err)
	}
	interval := h.cfg.UpdateInterval
	if interval <= 0 {
		interval = DefaultUpdateInterval
	}
	// Keep a few intervals of history so a late Collect still finds values.
	if err := h.api.WatchFieldsWithGroupEx(h.fieldGroup, h.api.GroupAllGPUs(), interval.Microseconds(), 5*interval.Seconds(), 0); err != nil {
		_ = h.api.FieldGroupDestroy(h.fieldGroup)
		return fmt.Errorf("watch DCGM fields every %s: %w", interval, err)
	}
	if len(h.instances) == 0 {
		return nil
	}
	group, err := h.api.CreateGroup(name)
	if err == nil {
		h.instanceGroup = &group
		for _, in := range h.instances {
			if err = h.api.AddEntityToGroup(group, godcgm.FE_GPU_I, in.entity); err != nil {
				err = fmt.Errorf("add GPU instance %s of %s: %w", in.id, in.gpu.uuid, err)
				break
			}
		}
	}
	if err == nil {
		err = h.api.WatchFieldsWithGroupEx(h.fieldGroup, group, interval.Microseconds(), 5*interval.Seconds(), 0)
	}
	if err != nil {
		if h.instanceGroup != nil {
			_ = h.api.DestroyGroup(group)
		}
		_ = h.api.FieldGroupDestroy(h.fieldGroup)
		return fmt.Errorf("watch DCGM fields of %d MIG instances every %s: %w", len(h.instances), interval, err)
	}
	return nil
}

// findInstances reads the MIG hierarchy and the profile name of each GPU
// instance, as dcgm-exporter does for its GPU_I_PROFILE label.
func (h *HostEngine) findInstances() error {
	hierarchy, err := h.api.GetGPUInstanceHierarchy()
	if err != nil {
		return fmt.Errorf("read DCGM's MIG hierarchy: %w", err)
	}
	entries := hierarchy.EntityList[:min(hierarchy.Count, uint(len(hierarchy.EntityList)))]
	var entities []godcgm.GroupEntityPair
	for _, e := range entries {
		if e.Entity.EntityGroupId == godcgm.FE_GPU_I {
			entities = append(entities, e.Entity)
		}
	}
	names, devices := map[uint]string{}, map[uint]string{}
	if len(entities) > 0 {
		// On a GPU instance, DCGM_FI_DEV_UUID reads the instance's own MIG-
		// UUID.
		values, err := h.api.EntitiesGetLatestValues(entities, []godcgm.Short{godcgm.DCGM_FI_DEV_NAME, godcgm.DCGM_FI_DEV_UUID}, godcgm.DCGM_FV_FLAG_LIVE_DATA)
		if err != nil {
			return fmt.Errorf("read the profile names of %d MIG instances: %w", len(entities), err)
		}
		for _, v := range values {
			if v.Status != 0 || v.FieldType != godcgm.DCGM_FT_STRING {
				continue
			}
			switch v.FieldID {
			case godcgm.DCGM_FI_DEV_NAME:
				names[v.EntityID] = v.String()
			case godcgm.DCGM_FI_DEV_UUID:
				if u := strings.TrimSpace(v.String()); strings.HasPrefix(u, "MIG-") {
					devices[v.EntityID] = u
				}
			}
		}
	}
	h.instances = migInstances(entries, h.gpus, names)
	for i := range h.instances {
		h.instances[i].device = devices[h.instances[i].entity]
	}
	return nil
}

// InstanceDeviceIDs implements InstanceDevicer: the MIG- UUID of each
// instance DCGM gave one for.
func (h *HostEngine) InstanceDeviceIDs() map[InstanceKey]string {
	out := make(map[InstanceKey]string, len(h.instances))
	for _, in := range h.instances {
		if in.device != "" {
			out[InstanceKey{in.gpu.uuid, in.id}] = in.device
		}
	}
	return out
}

// migInstances lists the GPU instances of a MIG hierarchy under the GPUs
// they belong to. An instance whose profile name DCGM did not give is named
// by its compute slices ("<n>g"), which is all the idle split reads of it.
func migInstances(entries []godcgm.MigHierarchyInfo_v2, gpus []hostGPU, names map[uint]string) []hostInstance {
	var out []hostInstance
	for _, e := range entries {
		if e.Entity.EntityGroupId != godcgm.FE_GPU_I {
			continue
		}
		i := slices.IndexFunc(gpus, func(g hostGPU) bool { return g.uuid == e.Info.GpuUuid })
		if i < 0 {
			i = slices.IndexFunc(gpus, func(g hostGPU) bool {
				return e.Parent.EntityGroupId == godcgm.FE_GPU && g.id == e.Parent.EntityId
			})
		}
		if i < 0 {
			continue
		}
		profile := strings.TrimSpace(names[e.Entity.EntityId])
		if profile == "" {
			profile = strconv.FormatUint(uint64(e.Info.NvmlProfileSlices), 10) + "g"
		}
		out = append(out, hostInstance{entity: e.Entity.EntityId, gpu: gpus[i],
			id: strconv.FormatUint(uint64(e.Info.NvmlInstanceId), 10), profile: profile})
	}
	return out
}

// labels are the labels dcgm-exporter would print on the series of gpu,
// or of its instance in when in is not nil.
func (h *HostEngine) labels(gpu hostGPU, in *hostInstance) labelFunc {
	index := strconv.FormatUint(uint64(gpu.id), 10)
	return func(name string) string {
		switch name {
		case labelUUID:
			return gpu.uuid
		case labelGPU:
			return index
		case labelHostname:
			return h.cfg.Node
		case labelModel:
			return gpu.model
		case labelGPUInstance:
			if in != nil {
				return in.id
			}
		case labelGPUProfile:
			if in != nil {
				return in.profile
			}
		case labelDRAMIGDeviceUUID:
			// The instance's own UUID, which dcgm-exporter prints only
			// for a claimed instance, is known here for every one: it
			// is what joins the instance to its ResourceSlice device.
			if in != nil {
				return in.device
			}
		}
		return ""
	}
}

// Collect implements Source. A field DCGM reports as blank or unsupported
// (PROF_* on GPUs without profiling) stays 0, as it does when dcgm-exporter
// omits the series.
func (h *HostEngine) Collect(ctx context.Context) ([]schedloop.GPUSample, error) {
	set := newSampleSet(len(h.gpus))
	var errs []error
	for _, g := range h.gpus {
		if err := ctx.Err(); err != nil {
			return set.sorted(), err
		}
		values, err := h.api.EntityGetLatestValues(godcgm.FE_GPU, g.id, hostEngineFields)
		if err != nil {
			errs = append(errs, fmt.Errorf("read DCGM fields of GPU %d (%s): %w", g.id, g.uuid, err))
			continue
		}
		errs = append(errs, addValues(set, values, h.labels(g, nil))...)
	}
	// A partitioned GPU's instances are samples of their own under the
	// GPU's UUID, as dcgm-exporter prints them.
	for i := range h.instances {
		in := &h.instances[i]
		if err := ctx.Err(); err != nil {
			return set.sorted(), err
		}
		values, err := h.api.EntityGetLatestValues(godcgm.FE_GPU_I, in.entity, hostEngineFields)
		if err != nil {
			errs = append(errs, fmt.Errorf("read DCGM fields of MIG instance %s of GPU %d (%s): %w", in.id, in.gpu.id, in.gpu.uuid, err))
			continue
		}
		errs = append(errs, addValues(set, values, h.labels(in.gpu, in))...)
	}
	if h.Inventory != nil {
		h.Inventory(set.inventory())
	}
	return set.sorted(), errors.Join(errs...)
}

// addValues adds one entity's field values to set as one sample: all its
// fields take the newest timestamp among them so they merge.
func addValues(set *sampleSet, values []godcgm.FieldValue_v1, label labelFunc) []error {
	var at time.Time
	for _, v := range values {
		if t := time.UnixMicro(v.TS); v.Status == 0 && t.After(at) {
			at = t
		}
	}
	var errs []error
	for _, v := range values {
		f, ok := fieldValue(v)
		if !ok {
			continue
		}
		if err := set.add(hostEngineMetric[v.FieldID], label, f, at); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// fieldValue converts a DCGM value, rejecting blanks and error sentinels.
func fieldValue(v godcgm.FieldValue_v1) (float64, bool) {
	if v.Status != 0 {
		return 0, false
	}
	switch v.FieldType {
	case godcgm.DCGM_FT_DOUBLE:
		f := v.Float64()
		if f >= godcgm.DCGM_FT_FP64_BLANK {
			return 0, false
		}
		return f, true
	case godcgm.DCGM_FT_INT64:
		i := v.Int64()
		if i >= godcgm.DCGM_FT_INT64_BLANK || (i >= godcgm.DCGM_FT_INT32_BLANK && i <= godcgm.DCGM_FT_INT32_BLANK+4) {
			return 0, false
		}
		return float64(i), true
	}
	return 0, false
}

// Close stops watching and releases DCGM.
func (h *HostEngine) Close() error {
	var err error
	h.closeOnce.Do(func() {
		if h.instanceGroup != nil {
			if e := h.api.DestroyGroup(*h.instanceGroup); e != nil {
				err = fmt.Errorf("destroy DCGM group of MIG instances: %w", e)
			}
		}
		if e := h.api.FieldGroupDestroy(h.fieldGroup); e != nil {
			err = errors.Join(err, fmt.Errorf("destroy DCGM field group: %w", e))
		}
		if h.cleanup != nil {
			h.cleanup()
		}
	})
	return err
}
