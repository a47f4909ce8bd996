//go:build cgo

package dcgm

import (
	"context"
	"errors"
	"fmt"
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
	closeOnce  sync.Once
}

type hostGPU struct {
	id   uint
	uuid string
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
	h := &HostEngine{cfg: cfg, cleanup: cleanup}
	if err := h.watch(); err != nil {
		cleanup()
		return nil, err
	}
	return h, nil
}

// isLibraryMissing recognises go-dcgm's dlopen failure, which it reports only
// as text ("libdcgm.so.4 not found").
func isLibraryMissing(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "libdcgm.so") && strings.Contains(msg, "not found")
}

func (h *HostEngine) watch() error {
	ids, err := godcgm.GetSupportedDevices()
	if err != nil {
		return fmt.Errorf("list DCGM-supported GPUs: %w", err)
	}
	for _, id := range ids {
		dev, err := godcgm.GetDeviceInfo(id)
		if err != nil {
			return fmt.Errorf("read DCGM device info of GPU %d: %w", id, err)
		}
		h.gpus = append(h.gpus, hostGPU{id: id, uuid: dev.UUID})
	}
	name := "schedloop-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	h.fieldGroup, err = godcgm.FieldGroupCreate(name, hostEngineFields)
	if err != nil {
		return fmt.Errorf("create DCGM field group %s: %w", name, err)
	}
	interval := h.cfg.UpdateInterval
	if interval <= 0 {
		interval = DefaultUpdateInterval
	}
	// Keep a few intervals of history so a late Collect still finds values.
	if err := godcgm.WatchFieldsWithGroupEx(h.fieldGroup, godcgm.GroupAllGPUs(), interval.Microseconds(), 5*interval.Seconds(), 0); err != nil {
		_ = godcgm.FieldGroupDestroy(h.fieldGroup)
		return fmt.Errorf("watch DCGM fields every %s: %w", interval, err)
	}
	return nil
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
		values, err := godcgm.EntityGetLatestValues(godcgm.FE_GPU, g.id, hostEngineFields)
		if err != nil {
			errs = append(errs, fmt.Errorf("read DCGM fields of GPU %d (%s): %w", g.id, g.uuid, err))
			continue
		}
		index := strconv.FormatUint(uint64(g.id), 10)
		label := func(name string) string {
			switch name {
			case labelUUID:
				return g.uuid
			case labelGPU:
				return index
			case labelHostname:
				return h.cfg.Node
			}
			return ""
		}
		// All fields of one GPU share the newest timestamp so they merge
		// into one sample.
		var at time.Time
		for _, v := range values {
			if t := time.UnixMicro(v.TS); v.Status == 0 && t.After(at) {
				at = t
			}
		}
		for _, v := range values {
			f, ok := fieldValue(v)
			if !ok {
				continue
			}
			if err := set.add(hostEngineMetric[v.FieldID], label, f, at); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return set.sorted(), errors.Join(errs...)
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
		if e := godcgm.FieldGroupDestroy(h.fieldGroup); e != nil {
			err = fmt.Errorf("destroy DCGM field group: %w", e)
		}
		h.cleanup()
	})
	return err
}
