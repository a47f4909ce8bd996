package dcgm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

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
			contentType := contentTypeText
			if strings.HasSuffix(in, ".om.txt") {
				contentType = contentTypeOpenMetrics
			}
			samples, err := ParseExporter(page, contentType, scrapeTime)
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
			page: fmt.Sprintf("%s{gpu=\"3\",UUID=%q} 1 %d\n", MetricGPUUtil, uuid, scrapeTime.Add(-time.Minute).UnixMilli()),
			want: []schedloop.GPUSample{{Time: scrapeTime.Add(-time.Minute), GPUUUID: uuid, GPUIndex: 3, GPUUtil: 1}},
		},
		{
			name:    "timestamp far from the scrape",
			page:    fmt.Sprintf("%s{gpu=\"3\",UUID=%q} 1 1717171717000\n", MetricGPUUtil, uuid),
			wantErr: "timestamp 2024-05-31T16:08:37Z is more than 10m0s from the scrape time",
		},
		{name: "NUL byte", page: line(MetricGPUUtil, ",pod=\"a\x00b\"", "1"), wantErr: "page holds a NUL byte at offset 101"},
		{name: "invalid UTF-8", page: line(MetricGPUUtil, ",pod=\"a\xffb\"", "1"), wantErr: "invalid UTF-8 label value"},
		{name: "utilisation over 100", page: line(MetricGPUUtil, "", "100.5"), wantErr: "DCGM_FI_DEV_GPU_UTIL GPU " + uuid + ": value 100.5 outside [0, 100]"},
		{name: "negative power", page: line(MetricPowerUsage, "", "-1"), wantErr: "value -1 outside"},
		{name: "NaN ratio", page: line(MetricSMActive, "", "NaN"), wantErr: "value NaN outside [0, 1]"},
		{name: "infinite memory", page: line(MetricFBUsed, "", "+Inf"), wantErr: "value +Inf outside"},
		{name: "GPU index over the column", page: strings.Replace(line(MetricGPUUtil, "", "1"), `gpu="3"`, `gpu="40000"`, 1), wantErr: `label gpu="40000" is not a GPU index (0..32767)`},
		{name: "other families unchecked", page: line(MetricGPUUtil, "", "1") + "DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} -300\n",
			want: []schedloop.GPUSample{{Time: scrapeTime, GPUUUID: uuid, Node: "node-1", GPUIndex: 3, GPUUtil: 1}}},
		{name: "summary of a stored name", page: "# TYPE DCGM_FI_DEV_GPU_UTIL summary\n" + line(MetricGPUUtil, ",quantile=\"0.5\"", "1"), wantErr: "type summary has no single value"},
		{name: "empty page", page: ""},
		{name: "malformed line", page: "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\" 1\n", wantErr: "parse text exposition"},
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
		checkParsed(t, page, contentTypeText)
	})
}

// checkParsed parses page and holds what it accepts to what the store
// takes: a UUID, an index that fits, values in their columns' ranges.
func checkParsed(t *testing.T, page []byte, contentType string) {
	t.Helper()
	samples, err := ParseExporter(page, contentType, scrapeTime)
	if err != nil {
		return
	}
	for _, s := range samples {
		if s.GPUUUID == "" || s.GPUIndex < -1 || s.GPUIndex > maxGPUIndex {
			t.Fatalf("sample %+v from %q: want a UUID and an index in [-1, %d]", s, page, maxGPUIndex)
		}
		for m, v := range []float64{s.GPUUtil, s.GrEngineActive, s.SMActive, s.FBUsedMiB, s.PowerWatts} {
			if checkValue(m, v) != nil {
				t.Fatalf("sample %+v from %q: %s = %v out of range", s, page, Metrics[m], v)
			}
		}
		if d := s.Time.Sub(scrapeTime); d > DefaultTimestampWindow || d < -DefaultTimestampWindow {
			t.Fatalf("sample %+v from %q: time outside the window", s, page)
		}
		// A MIG instance carries its profile and a share of its GPU in
		// (0, 1]; a whole GPU carries neither.
		if (s.GPUInstance == "") != (s.GPUInstanceProfile == "") || (s.GPUInstance == "") != (s.ComputeShare == 0) ||
			s.ComputeShare < 0 || s.ComputeShare > 1 {
			t.Fatalf("sample %+v from %q: instance, profile and compute share disagree", s, page)
		}
		// A DRA MIG UUID names an instance, never a whole GPU.
		if s.MIGDeviceUUID != "" && (s.GPUInstance == "" || !strings.HasPrefix(s.MIGDeviceUUID, "MIG-")) {
			t.Fatalf("sample %+v from %q: MIG device UUID on a whole GPU, or not a MIG UUID", s, page)
		}
	}
}

// openMetricsCases are the OpenMetrics 1.0 specification's edge cases as
// they meet a dcgm-exporter page; the fuzz target starts from them.
var openMetricsCases = []struct {
	name, page, wantErr string
	samples             int
}{
	{name: "minimal", page: omLine(MetricGPUUtil, "7") + "# EOF\n", samples: 1},
	{name: "no EOF", page: omLine(MetricGPUUtil, "7"), wantErr: "data does not end with # EOF"},
	{name: "second EOF", page: omLine(MetricGPUUtil, "7") + "# EOF\n# EOF\n", wantErr: "unexpected data after # EOF"},
	{name: "data after EOF", page: "# EOF\n" + omLine(MetricGPUUtil, "7"), wantErr: "unexpected data after # EOF"},
	{name: "empty page", page: "", wantErr: "data does not end with # EOF"},
	{name: "EOF only", page: "# EOF\n"},
	{name: "unit and help", page: "# TYPE DCGM_FI_DEV_FB_USED_mebibytes gauge\n# UNIT DCGM_FI_DEV_FB_USED_mebibytes mebibytes\n# HELP DCGM_FI_DEV_FB_USED_mebibytes used.\n" +
		"DCGM_FI_DEV_FB_USED_mebibytes{UUID=\"GPU-1\"} 3\n" + omLine(MetricFBUsed, "3") + "# EOF\n", samples: 1},
	{name: "unit not a suffix", page: "# TYPE DCGM_FI_DEV_FB_USED gauge\n# UNIT DCGM_FI_DEV_FB_USED bytes\n" + omLine(MetricFBUsed, "3") + "# EOF\n", wantErr: `unit "bytes" not a suffix`},
	{name: "counter with created and exemplar", page: "# TYPE DCGM_FI_DEV_XID_ERRORS counter\n" +
		"DCGM_FI_DEV_XID_ERRORS_total{UUID=\"GPU-1\"} 3 # {trace_id=\"abc\"} 1 1717171717.000\n" +
		"DCGM_FI_DEV_XID_ERRORS_created{UUID=\"GPU-1\"} 1717171000\n" + omLine(MetricGPUUtil, "7") + "# EOF\n", samples: 1},
	{name: "gauge with timestamp in seconds", page: fmt.Sprintf("DCGM_FI_DEV_GPU_UTIL{UUID=\"GPU-1\",gpu=\"0\"} 7 %d.250\n# EOF\n", scrapeTime.Unix()), samples: 1},
	{name: "escaped label value", page: `DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1",gpu="0",pod="a\"b\\c\nd"} 7` + "\n# EOF\n", samples: 1},
	{name: "unknown type", page: "# TYPE DCGM_FI_DEV_GPU_UTIL unknown\n" + omLine(MetricGPUUtil, "7") + "# EOF\n", samples: 1},
	{name: "histogram named as a stored field", page: "# TYPE DCGM_FI_DEV_GPU_UTIL histogram\nDCGM_FI_DEV_GPU_UTIL_bucket{UUID=\"GPU-1\",le=\"+Inf\"} 1\n" +
		"DCGM_FI_DEV_GPU_UTIL_count{UUID=\"GPU-1\"} 1\nDCGM_FI_DEV_GPU_UTIL_sum{UUID=\"GPU-1\"} 1\n# EOF\n"},
	{name: "invalid type", page: "# TYPE DCGM_FI_DEV_GPU_UTIL wibble\n# EOF\n", wantErr: `invalid metric type "wibble"`},
	{name: "blank line", page: omLine(MetricGPUUtil, "7") + "\n# EOF\n", wantErr: "parse OpenMetrics exposition"},
	{name: "CRLF", page: strings.ReplaceAll(omLine(MetricGPUUtil, "7")+"# EOF\n", "\n", "\r\n"), wantErr: "parse OpenMetrics exposition"},
}

func omLine(metric, v string) string {
	return fmt.Sprintf("%s{UUID=\"GPU-1\",gpu=\"0\",Hostname=\"node-1\"} %s\n", metric, v)
}

func TestParseOpenMetricsSpec(t *testing.T) {
	for _, tt := range openMetricsCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseExporter([]byte(tt.page), "application/openmetrics-text; version=1.0.0; charset=utf-8", scrapeTime)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one mentioning %q", err, tt.wantErr)
				}
				var se *ScrapeError
				if !errors.As(err, &se) || se.Reason != ReasonParse {
					t.Errorf("error %v: want reason %s", err, ReasonParse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.samples {
				t.Fatalf("got %d samples %+v, want %d", len(got), got, tt.samples)
			}
		})
	}
}

// TestTextAndOpenMetricsAgree renders every valid text page of testdata, and
// a 1,000-GPU page, as OpenMetrics with expfmt's encoder and requires the
// same samples from both.
func TestTextAndOpenMetricsAgree(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "exporter", "*.prom"))
	if err != nil {
		t.Fatal(err)
	}
	pages := map[string][]byte{"generated-1000-gpus": exporterPage(1000)}
	for _, in := range inputs {
		if pages[filepath.Base(in)], err = os.ReadFile(in); err != nil {
			t.Fatal(err)
		}
	}
	compared := 0
	for name, page := range pages {
		text, err := ParseExporterText(page, scrapeTime)
		if err != nil {
			continue // a bad page's error is held by its golden file
		}
		om := toOpenMetrics(t, page)
		got, err := ParseExporter(om, "application/openmetrics-text; version=1.0.0", scrapeTime)
		if err != nil {
			t.Errorf("%s as OpenMetrics: %v\n%s", name, err, om)
			continue
		}
		if !slices.Equal(got, text) {
			t.Errorf("%s: OpenMetrics gives %+v\ntext gives %+v", name, got, text)
		}
		compared++
	}
	if compared < 5 {
		t.Fatalf("compared %d pages, want every valid page of testdata", compared)
	}
}

// toOpenMetrics re-encodes a text page as OpenMetrics 1.0.
func toOpenMetrics(t testing.TB, page []byte) []byte {
	t.Helper()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(maps.Keys(fams))
	var b bytes.Buffer
	for _, n := range names {
		if _, err := expfmt.MetricFamilyToOpenMetrics(&b, fams[n]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := expfmt.FinalizeOpenMetrics(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func FuzzParseExporterOpenMetrics(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "exporter", "l40s.om.txt"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, c := range openMetricsCases {
		f.Add([]byte(c.page))
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		checkParsed(t, page, contentTypeOpenMetrics)
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
	for i, m := range Metrics {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", m, help[m], m)
		for g := 0; g < gpus; g++ {
			v := float64(50 + g%50)
			if i == 1 || i == 2 { // the PROF fields are ratios
				v /= 100
			}
			fmt.Fprintf(&b, "%s{gpu=\"%d\",UUID=\"GPU-%08x-1111-2222-3333-444455556666\",pci_bus_id=\"00000000:%02X:00.0\",device=\"nvidia%d\",modelName=\"NVIDIA A100-SXM4-80GB\",Hostname=\"node-%d\",DCGM_FI_DRIVER_VERSION=\"535.104.12\",container=\"trainer\",namespace=\"ml\",pod=\"job-%d-%d\"} %g\n",
				m, g%8, g, g%8+7, g%8, g/8, g/64, g/8, v)
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

// TestInventoryKeepsInstances reads NVIDIA's documented MIG page: the GPU
// is listed once as a whole device and its instance once after it, under
// the same UUID and index.
func TestInventoryKeepsInstances(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("testdata", "exporter", "nvidia-docs-a100-mig.prom"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := newPageParser().parse(context.Background(), page, contentTypeText, scrapeTime, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	const uuid = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"
	want := []schedloop.GPU{
		{UUID: uuid, Node: "ub20-a100-k8s", Index: 0},
		{UUID: uuid, Node: "ub20-a100-k8s", Index: 0, MIGProfile: "1g.5gb", Instance: "13"},
	}
	if diff := cmp.Diff(want, set.inventory()); diff != "" {
		t.Errorf("inventory (-want +got):\n%s", diff)
	}
}
