package exporter

import (
	"bytes"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Farm is a set of stand-in dcgm-exporter targets for benchmarks and soak
// tests: ordinary 8-GPU node pages and the hostile targets a collector must
// survive beside them.
type Farm struct {
	// Nodes is the number of ordinary targets, each an 8-GPU node's page
	// with dcgm-exporter's default counters, served as ServePage does.
	Nodes int
	// HugeOpenMetricsGPUs, when positive, adds one target serving that many
	// GPUs' five stored fields as OpenMetrics in one page (16,000 GPUs are
	// 11.7 MB).
	HugeOpenMetricsGPUs int
	// OverLimitBytes, when positive, adds one target whose chunked page
	// (no Content-Length) is that long.
	OverLimitBytes int
	// Trickle adds one target that sends its page a byte a second.
	Trickle bool
	// Silent adds one target that accepts connections and never answers.
	Silent bool
}

// Five stored fields, as the collector's dcgm package names them; listed
// here so the harness does not import the collector's room.
var storedFields = []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE",
	"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"}

// manyGPUs is a Source of n busy GPUs on one node.
type manyGPUs int

func (n manyGPUs) GPUs(node string) []GPU {
	out := make([]GPU, n)
	for i := range out {
		out[i] = GPU{Index: i % 8, UUID: fmt.Sprintf("GPU-%s-%d", node, i), Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
			Pod: fmt.Sprintf("train-%d", i/8), Namespace: "ml", Container: "main", Util: 0.5, MemFraction: 0.5}
	}
	return out
}

// Serve starts the farm's targets on loopback ports. urls lists the
// ordinary targets first (node-00000, node-00001, ...), then the hostile
// ones in the order of the fields above; stop ends them all.
func (f Farm) Serve() (urls []string, stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	for n := range f.Nodes {
		var page bytes.Buffer
		if err := New(fmt.Sprintf("node-%05d", n), BusyNode{}).Write(&page); err != nil {
			return nil, stop, err
		}
		u, s, err := ServePage(page.Bytes())
		if err != nil {
			return nil, stop, err
		}
		urls, stops = append(urls, u), append(stops, s)
	}
	add := func(h http.Handler) error {
		srv := serveHandler(h)
		u, s, err := srv()
		if err != nil {
			return err
		}
		urls, stops = append(urls, u), append(stops, s)
		return nil
	}
	if f.HugeOpenMetricsGPUs > 0 {
		page, err := openMetricsPage(New("huge-node", manyGPUs(f.HugeOpenMetricsGPUs)).WithCounters(storedFields...))
		if err != nil {
			return nil, stop, err
		}
		if err := add(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
			w.Header().Set("Content-Length", strconv.Itoa(len(page)))
			_, _ = w.Write(page)
		})); err != nil {
			return nil, stop, err
		}
	}
	if f.OverLimitBytes > 0 {
		line := []byte("# filler of an oversized page\n")
		if err := add(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			for sent := 0; sent < f.OverLimitBytes; sent += len(line) {
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		})); err != nil {
			return nil, stop, err
		}
	}
	if f.Trickle {
		if err := add(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				if _, err := w.Write([]byte("#")); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-t.C:
				}
			}
		})); err != nil {
			return nil, stop, err
		}
	}
	if f.Silent {
		if err := add(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })); err != nil {
			return nil, stop, err
		}
	}
	return urls, stop, nil
}

// serveHandler returns a starter for a loopback HTTP server of h.
func serveHandler(h http.Handler) func() (string, func(), error) {
	return func() (string, func(), error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		var wg sync.WaitGroup
		wg.Go(func() { _ = srv.Serve(ln) })
		return "http://" + ln.Addr().String() + "/metrics", func() { srv.Close(); wg.Wait() }, nil
	}
}

// openMetricsPage renders e's page as OpenMetrics 1.0.
func openMetricsPage(e *Exporter) ([]byte, error) {
	var text bytes.Buffer
	if err := e.Write(&text); err != nil {
		return nil, err
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(&text)
	if err != nil {
		return nil, err
	}
	var om bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		if _, err := expfmt.MetricFamilyToOpenMetrics(&om, fams[name]); err != nil {
			return nil, err
		}
	}
	if _, err := expfmt.FinalizeOpenMetrics(&om); err != nil {
		return nil, err
	}
	return om.Bytes(), nil
}
