// Package exporter serves simulated dcgm-exporter endpoints: one HTTP
// /metrics per node, in the exposition format, metric names, HELP texts and
// label names that NVIDIA's dcgm-exporter uses, with values that follow the
// pods holding each GPU.
//
// It knows nothing of Kubernetes: a Source says which pod holds which GPU and
// how busy it is.
package exporter

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"
)

// GPU is the state of one device at scrape time.
type GPU struct {
	Index     int
	UUID      string
	Model     string // modelName label, e.g. "NVIDIA H100 80GB HBM3"
	MemoryMiB int64  // framebuffer size
	// Instance and Profile name a MIG instance of the GPU UUID (GPU_I_ID,
	// GPU_I_PROFILE), "" for the whole GPU. dcgm-exporter prints a
	// partitioned GPU's instances under the GPU's UUID and index, beside
	// the whole GPU's own series; MemoryMiB is then the instance's part.
	Instance, Profile string
	// MIGUUID is a MIG instance's own UUID, as NVML and DCGM name it
	// (DCGM_FI_DEV_UUID of the GPU instance entity) and NVIDIA's DRA
	// driver publishes it. dcgm-exporter prints it (dra_mig_device_uuid)
	// only on an instance a ResourceClaim holds, that is with DRA set.
	MIGUUID string
	// The pod holding the GPU; empty when the GPU is free.
	Pod, Namespace, Container string
	// DRA is the claim allocation that handed the device to Pod; nil when
	// the device plugin did, or the device is free.
	DRA         *DRADevice
	Util        float64 // 0..1 while held; free GPUs are idle
	MemFraction float64 // share of the framebuffer in use while held
}

// DRADevice is a device as a ResourceClaim's allocation names it, which
// dcgm-exporter run with KUBERNETES_ENABLE_DRA prints on the device's
// series (dra_claim_name, dra_claim_namespace, dra_driver_name,
// dra_pool_name, dra_device_name; NVIDIA/dcgm-exporter,
// internal/pkg/transformation/const.go), and on a MIG instance's also its
// profile and MIG- UUID (dra_mig_profile, dra_mig_device_uuid).
type DRADevice struct {
	ClaimName, ClaimNamespace string
	Driver, Pool, Device      string
}

// Source reports the GPUs of a node.
type Source interface {
	GPUs(node string) []GPU
}

// Power model: an idle GPU draws IdleWatts, a fully busy one MaxWatts.
const (
	IdleWatts     = 70.0
	MaxWatts      = 700.0
	driverVersion = "560.35.03"
)

// field is one exported DCGM field: name, type, HELP text as dcgm-exporter's
// default counters file words it, and how to compute it.
type field struct {
	name, help string
	typ        dto.MetricType
	value      func(g GPU, energyMJ float64) float64
}

var fields = []field{
	{"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return 210 + g.Util*(1980-210) }},
	{"DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return 2619 }},
	{"DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return round(30 + 35*g.Util) }},
	{"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return round(28 + 45*g.Util) }},
	{"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return watts(g) }},
	{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", dto.MetricType_COUNTER,
		func(_ GPU, e float64) float64 { return round(e) }},
	{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", dto.MetricType_COUNTER,
		func(GPU, float64) float64 { return 0 }},
	{"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return round(100 * g.Util) }},
	{"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return round(40 * g.Util) }},
	{"DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", dto.MetricType_GAUGE,
		func(GPU, float64) float64 { return 0 }},
	{"DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", dto.MetricType_GAUGE,
		func(GPU, float64) float64 { return 0 }},
	{"DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", dto.MetricType_GAUGE,
		func(GPU, float64) float64 { return 0 }},
	{"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return float64(g.MemoryMiB) - fbUsed(g) }},
	{"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return fbUsed(g) }},
	{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return ratio(g.Util) }},
	{"DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return ratio(0.9 * g.Util) }},
	{"DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM.", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return ratio(0.5 * g.Util) }},
	{"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return ratio(0.6 * g.Util) }},
	{"DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data.", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return ratio(0.45 * g.Util) }},
	{"DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return round(2e8 * g.Util) }},
	{"DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", dto.MetricType_GAUGE,
		func(g GPU, _ float64) float64 { return round(8e8 * g.Util) }},
}

func round(v float64) float64 { return float64(int64(v + 0.5)) }

// ratio keeps the six decimals dcgm-exporter prints for profiling fields.
func ratio(v float64) float64 { return float64(int64(v*1e6+0.5)) / 1e6 }

func watts(g GPU) float64 { return ratio(IdleWatts + g.Util*(MaxWatts-IdleWatts)) }

func fbUsed(g GPU) float64 {
	if g.Pod == "" {
		return 0
	}
	return round(g.MemFraction * float64(g.MemoryMiB))
}

// BusyNode is a Source of eight GPUs per node, each held by a pod at a
// steady utilisation: the same page scrape after scrape, for benchmarks.
type BusyNode struct{}

// GPUs implements Source.
func (BusyNode) GPUs(node string) []GPU {
	out := make([]GPU, 8)
	for i := range out {
		out[i] = GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i), Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
			Pod: fmt.Sprintf("train-%s-%d", node, i/4), Namespace: "ml", Container: "main", Util: 0.1 * float64(i), MemFraction: 0.5}
	}
	return out
}

// Exporter is the simulated dcgm-exporter of one node.
type Exporter struct {
	node, hostname string
	src            Source
	now            func() time.Time
	counters       []string

	mu     sync.Mutex
	energy map[string]float64 // mJ per energyKey
	last   time.Time

	srv *http.Server
	ln  net.Listener
}

// New makes the exporter of node; hostname fills the Hostname label
// (dcgm-exporter reports the node name there when run as a DaemonSet).
func New(node string, src Source) *Exporter {
	return &Exporter{node: node, hostname: node, src: src, now: time.Now, energy: map[string]float64{}}
}

// WithCounters limits the page to the metrics named, as dcgm-exporter's
// counters file (-f) does; without it the page has every field above.
func (e *Exporter) WithCounters(names ...string) *Exporter {
	e.counters = names
	return e
}

// Serve listens on a free loopback port and serves /metrics until Close.
func (e *Exporter) Serve() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("exporter for %s: listen: %w", e.node, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", e)
	e.ln = ln
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// Serve returns http.ErrServerClosed at Close; any other failure shows
	// up as failed scrapes.
	go func() { _ = e.srv.Serve(ln) }()
	return nil
}

// URL is the /metrics address, empty before Serve.
func (e *Exporter) URL() string {
	if e.ln == nil {
		return ""
	}
	return "http://" + e.ln.Addr().String() + "/metrics"
}

// Close stops serving.
func (e *Exporter) Close() error {
	if e.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return e.srv.Shutdown(ctx)
}

// ServeHTTP writes the current metrics in the text exposition format.
func (e *Exporter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	if err := e.Write(w); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// Write writes one scrape of the node's GPUs.
func (e *Exporter) Write(w io.Writer) error {
	gpus := e.src.GPUs(e.node)
	energy := e.accumulate(gpus)
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fields {
		if e.counters != nil && !slices.Contains(e.counters, f.name) {
			continue
		}
		mf := &dto.MetricFamily{Name: proto.String(f.name), Help: proto.String(f.help), Type: f.typ.Enum()}
		for _, g := range gpus {
			v := f.value(g, energy[energyKey(g)])
			m := &dto.Metric{Label: e.labels(g)}
			if f.typ == dto.MetricType_COUNTER {
				m.Counter = &dto.Counter{Value: proto.Float64(v)}
			} else {
				m.Gauge = &dto.Gauge{Value: proto.Float64(v)}
			}
			mf.Metric = append(mf.Metric, m)
		}
		if err := enc.Encode(mf); err != nil {
			return fmt.Errorf("encode %s: %w", f.name, err)
		}
	}
	return nil
}

// labels in dcgm-exporter's order; pod labels only on GPUs a pod holds.
func (e *Exporter) labels(g GPU) []*dto.LabelPair {
	lp := func(k, v string) *dto.LabelPair { return &dto.LabelPair{Name: proto.String(k), Value: proto.String(v)} }
	ls := []*dto.LabelPair{
		lp("gpu", fmt.Sprint(g.Index)),
		lp("UUID", g.UUID),
		lp("pci_bus_id", fmt.Sprintf("00000000:%02X:00.0", 0x18+g.Index*0x10)),
		lp("device", fmt.Sprintf("nvidia%d", g.Index)),
		lp("modelName", g.Model),
		lp("Hostname", e.hostname),
	}
	if g.Instance != "" {
		ls = append(ls, lp("GPU_I_PROFILE", g.Profile), lp("GPU_I_ID", g.Instance))
	}
	ls = append(ls, lp("DCGM_FI_DRIVER_VERSION", driverVersion))
	if g.Pod != "" {
		ls = append(ls, lp("container", g.Container), lp("namespace", g.Namespace), lp("pod", g.Pod))
	}
	if d := g.DRA; d != nil && g.Pod != "" {
		ls = append(ls, lp("dra_claim_name", d.ClaimName), lp("dra_claim_namespace", d.ClaimNamespace),
			lp("dra_driver_name", d.Driver), lp("dra_pool_name", d.Pool), lp("dra_device_name", d.Device))
		if g.Instance != "" && g.MIGUUID != "" {
			ls = append(ls, lp("dra_mig_profile", g.Profile), lp("dra_mig_device_uuid", g.MIGUUID))
		}
	}
	return ls
}

// energyKey tells a GPU's instances apart from it and from each other.
func energyKey(g GPU) string { return g.UUID + "/" + g.Instance }

// accumulate integrates power into each GPU's energy counter up to now.
func (e *Exporter) accumulate(gpus []GPU) map[string]float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	dt := 0.0
	if !e.last.IsZero() {
		dt = now.Sub(e.last).Seconds()
	}
	e.last = now
	out := make(map[string]float64, len(gpus))
	for _, g := range gpus {
		k := energyKey(g)
		e.energy[k] += watts(g) * dt * 1000
		out[k] = e.energy[k]
	}
	return out
}
