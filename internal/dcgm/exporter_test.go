package dcgm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/schedloop/schedloop"
)

var scrapeTime = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestParseExporterGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "exporter", "*"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range inputs {
		if strings.HasSuffix(in, ".golden.json") {
			continue
		}
		n++
		t.Run(filepath.Base(in), func(t *testing.T) {
			page, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			format := expfmt.FmtText
			if strings.HasSuffix(in, ".om.txt") {
				format = expfmt.FmtOpenMetrics_1_0_0
			}
			samples, err := ParseExporter(bytes.NewReader(page), format, scrapeTime)
			out := goldenOutput{Samples: samples}
			if err != nil {
				out = goldenOutput{Error: err.Error()}
			}
			checkGolden(t, strings.TrimSuffix(strings.TrimSuffix(in, ".prom"), ".om.txt")+".golden.json", out)
		})
	}
	if n == 0 {
		t.Fatal("no inputs under testdata/exporter")
	}
}

func TestParseExporter(t *testing.T) {
	const uuid = "GPU-0b2c3d4e-1111-2222-3333-444455556666"
	line := func(metric, labels string, v string) string {
		return fmt.Sprintf("%s{gpu=\"3\",UUID=%q,Hostname=\"node-1\"%s} %s\n", metric, uuid, labels, v)
	}
	tests := []struct {
		name    string
		page    string
		want    []schedloop.GPUSample
		wantErr string
	}{
		{
			name: "five fields merge into one sample",
			page: line(MetricGPUUtil, "", "87") + line(MetricGrEngineActive, "", "0.9") + line(MetricSMActive, "", "0.75") +
				line(MetricFBUsed, "", "40960") + line(MetricPowerUsage, "", "312.5") + line("DCGM_FI_DEV_GPU_TEMP", "", "61"),
			want: []schedloop.GPUSample{{Time: scrapeTime, GPUUUID: uuid, Node: "node-1", GPUIndex: 3,
				GPUUtil: 87, GrEngineActive: 0.9, SMActive: 0.75, FBUsedMiB: 40960, PowerWatts: 312.5}},
		},
		{
			name: "exported labels win over target labels",
			page: line(MetricGPUUtil, `,pod="dcgm-exporter-1",namespace="gpu-operator",container="exporter",exported_pod="p",exported_namespace="ns",exported_container="c"`, "5"),
			want: []schedloop.GPUSample{{Time: scrapeTime, GPUUUID: uuid, Node: "node-1", GPUIndex: 3,
				PodNamespace: "ns", PodName: "p", Container: "c", GPUUtil: 5}},
		},
		{
			name: "explicit timestamp kept",
			page: fmt.Sprintf("%s{gpu=\"3\",UUID=%q} 1 1717171717000\n", MetricGPUUtil, uuid),
			want: []schedloop.GPUSample{{Time: time.UnixMilli(1717171717000), GPUUUID: uuid, GPUIndex: 3, GPUUtil: 1}},
		},
		{name: "empty page", page: ""},
		{name: "malformed line", page: "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\" 1\n", wantErr: "line 1"},
		{name: "missing UUID", page: "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 1\n", wantErr: "UUID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseExporterText([]byte(tt.page), scrapeTime)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d samples %+v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				if !got[i].Time.Equal(tt.want[i].Time) {
					t.Errorf("sample %d time = %v, want %v", i, got[i].Time, tt.want[i].Time)
				}
				got[i].Time = tt.want[i].Time
				if got[i] != tt.want[i] {
					t.Errorf("sample %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func FuzzParseExporterText(f *testing.F) {
	inputs, _ := filepath.Glob(filepath.Join("testdata", "exporter", "*.prom"))
	for _, in := range inputs {
		b, err := os.ReadFile(in)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		samples, err := ParseExporterText(page, scrapeTime)
		if err != nil {
			return
		}
		for _, s := range samples {
			if s.GPUUUID == "" || s.GPUIndex < -1 {
				t.Fatalf("sample %+v from %q: want a UUID and an index >= -1", s, page)
			}
		}
	})
}

func FuzzParseExporterOpenMetrics(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "exporter", "l40s.om.txt"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, page []byte) {
		_, _ = ParseExporter(bytes.NewReader(page), expfmt.FmtOpenMetrics_1_0_0, scrapeTime)
	})
}

// exporterPage renders a dcgm-exporter page for gpus GPUs (8 per node) with
// the five fields the parser reads.
func exporterPage(gpus int) []byte {
	var b bytes.Buffer
	help := map[string]string{
		MetricGPUUtil: "GPU utilization (in %).", MetricGrEngineActive: "Ratio of time the graphics engine is active.",
		MetricSMActive: "The ratio of cycles an SM has at least 1 warp assigned.", MetricFBUsed: "Framebuffer memory used (in MiB).",
		MetricPowerUsage: "Power draw (in W).",
	}
	for _, m := range Metrics {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", m, help[m], m)
		for g := 0; g < gpus; g++ {
			fmt.Fprintf(&b, "%s{gpu=\"%d\",UUID=\"GPU-%08x-1111-2222-3333-444455556666\",pci_bus_id=\"00000000:%02X:00.0\",device=\"nvidia%d\",modelName=\"NVIDIA A100-SXM4-80GB\",Hostname=\"node-%d\",DCGM_FI_DRIVER_VERSION=\"535.104.12\",container=\"trainer\",namespace=\"ml\",pod=\"job-%d-%d\"} %d\n",
				m, g%8, g, g%8+7, g%8, g/8, g/64, g/8, 50+g%50)
		}
	}
	return b.Bytes()
}

func BenchmarkParseExporterText(b *testing.B) {
	for _, gpus := range []int{8, 1000} {
		page := exporterPage(gpus)
		b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) {
			b.SetBytes(int64(len(page)))
			b.ReportAllocs()
			var n int
			for b.Loop() {
				samples, err := ParseExporterText(page, scrapeTime)
				if err != nil {
					b.Fatal(err)
				}
				n += len(samples)
			}
			if n != b.N*gpus {
				b.Fatalf("parsed %d samples, want %d", n, b.N*gpus)
			}
			// A "sample" here is one exposition line (one metric of one GPU).
			b.ReportMetric(float64(b.N*gpus*len(Metrics))/b.Elapsed().Seconds(), "lines/s")
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "gpusamples/s")
		})
	}
}
