package dcgm

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/common/expfmt"

	"github.com/schedloop/schedloop/internal/harness/exporter"
)

// benchGPUs is an exporter.Source with eight busy GPUs per node, as in the
// collector's end-to-end benchmark.
type benchGPUs struct{}

func (benchGPUs) GPUs(node string) []exporter.GPU {
	out := make([]exporter.GPU, 8)
	for i := range out {
		out[i] = exporter.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i), Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
			Pod: fmt.Sprintf("train-%s-%d", node, i/4), Namespace: "ml", Container: "main", Util: 0.1 * float64(i), MemFraction: 0.5}
	}
	return out
}

// keepOnly drops every metric family of page not in keep, HELP and TYPE
// lines included: what dcgm-exporter prints when its counters file lists
// only those fields.
func keepOnly(page []byte, keep []string) []byte {
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter(page, []byte("\n")) {
		name := line
		if bytes.HasPrefix(line, []byte("# HELP ")) || bytes.HasPrefix(line, []byte("# TYPE ")) {
			name = line[len("# HELP "):]
		}
		if i := bytes.IndexAny(name, "{ "); i >= 0 {
			name = name[:i]
		}
		if slices.Contains(keep, string(name)) {
			out.Write(line)
		}
	}
	return out.Bytes()
}

// harnessPages renders one 8-GPU node's page as the simulated exporter
// prints it: with dcgm-exporter's default counters, and trimmed to the five
// stored fields.
func harnessPages(tb testing.TB) (def, trimmed []byte) {
	var b bytes.Buffer
	if err := exporter.New("node-0001", benchGPUs{}).Write(&b); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes(), keepOnly(b.Bytes(), Metrics)
}

// BenchmarkParseExporterPage is the scraper's parse step on the pages of
// the collector's end-to-end benchmark: parsePage then sorted, the
// inventory only where the scraper has a callback for it.
func BenchmarkParseExporterPage(b *testing.B) {
	def, trimmed := harnessPages(b)
	for _, c := range []struct {
		name string
		page []byte
	}{{"page=default-21-fields", def}, {"page=trimmed-5-fields", trimmed}} {
		for _, inv := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/inventory=%v", c.name, inv), func(b *testing.B) {
				b.SetBytes(int64(len(c.page)))
				b.ReportAllocs()
				for b.Loop() {
					set, err := parsePage(c.page, expfmt.FmtText, scrapeTime)
					if err != nil {
						b.Fatal(err)
					}
					if inv && len(set.inventory()) != 8 {
						b.Fatal("inventory is not 8 GPUs")
					}
					if len(set.sorted()) != 8 {
						b.Fatal("not 8 samples")
					}
				}
			})
		}
	}
}

// TestHarnessPagesTakeFastPath keeps the benchmark honest: both pages must
// parse on the fast path, to what expfmt gives.
func TestHarnessPagesTakeFastPath(t *testing.T) {
	def, trimmed := harnessPages(t)
	for _, page := range [][]byte{def, trimmed} {
		got, err, ok := parseTextFast(page, scrapeTime)
		if !ok || err != nil {
			t.Fatalf("fast path: ok %v, err %v", ok, err)
		}
		want, err := parseWithExpfmt(page, scrapeTime)
		if err != nil || !sameSamples(got, want) || len(got) != 8 {
			t.Fatalf("fast %+v\nexpfmt %+v (%v)", got, want, err)
		}
	}
}
