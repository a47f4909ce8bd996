package dcgm

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/schedloop/schedloop"
)

// parseWithExpfmt is the reference: the page through expfmt only.
func parseWithExpfmt(page []byte, at time.Time) ([]schedloop.GPUSample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return nil, fmt.Errorf("parse text exposition: %w", err)
	}
	fams := make([]*dto.MetricFamily, 0, len(Metrics))
	for _, name := range Metrics {
		if mf, ok := byName[name]; ok {
			fams = append(fams, mf)
		}
	}
	return samplesFromFamilies(fams, at)
}

// sameSamples compares two results, NaN equal to NaN.
func sameSamples(a, b []schedloop.GPUSample) bool {
	if len(a) != len(b) {
		return false
	}
	nan := func(s schedloop.GPUSample) schedloop.GPUSample {
		for _, f := range []*float64{&s.GPUUtil, &s.GrEngineActive, &s.SMActive, &s.FBUsedMiB, &s.PowerWatts} {
			if math.IsNaN(*f) {
				*f = -12345.678
			}
		}
		return s
	}
	for i := range a {
		if !reflect.DeepEqual(nan(a[i]), nan(b[i])) {
			return false
		}
	}
	return true
}

// TestFastTextTakesCanonicalPages checks the fast path is actually used for
// what dcgm-exporter (and the harness's simulated one) print, and agrees
// with expfmt there.
func TestFastTextTakesCanonicalPages(t *testing.T) {
	pages := map[string][]byte{"generated-64": exporterPage(64)}
	for _, name := range []string{"a100-8gpu.prom", "a100-mig.prom", "h100-timesliced.prom"} {
		b, err := os.ReadFile(filepath.Join("testdata", "exporter", name))
		if err != nil {
			t.Fatal(err)
		}
		pages[name] = b
	}
	for name, page := range pages {
		got, err, ok := parseTextFast(page, scrapeTime)
		if !ok {
			t.Errorf("%s: fast path declined a canonical page", name)
			continue
		}
		want, wantErr := parseWithExpfmt(page, scrapeTime)
		if (err == nil) != (wantErr == nil) || !sameSamples(got, want) {
			t.Errorf("%s: fast path = %d samples, err %v; expfmt = %d samples, err %v", name, len(got), err, len(want), wantErr)
		}
	}
}

// TestFastTextFallsBack lists shapes the fast path must hand to expfmt, and
// checks ParseExporterText still answers as expfmt does.
func TestFastTextFallsBack(t *testing.T) {
	const series = `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="n"} 5` + "\n"
	tests := map[string]string{
		"no final newline":      strings.TrimSuffix(series, "\n"),
		"escaped label":         `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-\"1",Hostname="n"} 5` + "\n",
		"space in braces":       `DCGM_FI_DEV_GPU_UTIL{gpu="0", UUID="GPU-1"} 5` + "\n",
		"trailing comma":        `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",} 5` + "\n",
		"family split":          series + "other 1\n" + series,
		"histogram":             "# TYPE h histogram\nh_bucket{le=\"1\"} 1\n" + series,
		"type after samples":    series + "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n",
		"second help":           "# HELP x a\n# HELP x b\n" + series,
		"duplicate label":       `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",gpu="1"} 5` + "\n",
		"tab separator":         `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"}` + "\t5\n",
		"hex float":             `DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 0x1p-2` + "\n",
		"leading blank":         " " + series,
		"comment like help":     "#HELP DCGM_FI_DEV_GPU_UTIL x\n" + series,
		"quoted metric name":    `{"DCGM_FI_DEV_GPU_UTIL",gpu="0",UUID="GPU-1"} 5` + "\n",
		"reserved label":        `DCGM_FI_DEV_GPU_UTIL{__name__="x",UUID="GPU-1"} 5` + "\n",
		"invalid utf8 in value": "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-\xff\"} 5\n",
	}
	for name, page := range tests {
		if _, _, ok := parseTextFast([]byte(page), scrapeTime); ok {
			t.Errorf("%s: fast path accepted %q", name, page)
		}
		got, err := ParseExporterText([]byte(page), scrapeTime)
		want, wantErr := parseWithExpfmt([]byte(page), scrapeTime)
		if (err == nil) != (wantErr == nil) || !sameSamples(got, want) {
			t.Errorf("%s: ParseExporterText = %v, %v; expfmt = %v, %v", name, got, err, want, wantErr)
		}
	}
}

// storedLines is page without the lines of families outside Metrics: HELP
// and TYPE lines naming them, and samples whose metric name is theirs. It is
// what the fast path promises to read exactly as expfmt does.
func storedLines(page []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(page, []byte("\n")) {
		m := familyLine.FindSubmatch(line)
		if m == nil || slices.Contains(Metrics, string(m[1])+string(m[2])) {
			out = append(out, line...)
		}
	}
	return out
}

// familyLine matches a HELP or TYPE line or a sample line and captures the
// family name it belongs to, in the first group or the second.
var familyLine = regexp.MustCompile(`^(?:# (?:HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*)(?:[ \n]|$)|([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ])`)

// TestFastTextSkipsUnstoredFamilies checks the fast path's one leniency: a
// malformed sample in a family the collector does not read does not cost
// the page, and the samples are those of the page without that family.
func TestFastTextSkipsUnstoredFamilies(t *testing.T) {
	const other = "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n" +
		`DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",Hostname="n"} 1410` + "\n" +
		`DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-2",Hostname="n" 1410` + "\n"
	page := append([]byte(other), exporterPage(2)...)
	if _, err := parseWithExpfmt(page, scrapeTime); err == nil {
		t.Fatal("expfmt accepts the malformed line; the test no longer tests anything")
	}
	got, err, ok := parseTextFast(page, scrapeTime)
	if !ok || err != nil {
		t.Fatalf("fast path: ok %v, err %v", ok, err)
	}
	want, err := parseWithExpfmt(storedLines(page), scrapeTime)
	if err != nil || len(want) != 2 || !sameSamples(got, want) {
		t.Fatalf("fast path = %+v; expfmt without the other family = %+v, %v", got, want, err)
	}
	// The same line in a family the collector keeps still sends the page
	// to expfmt, which rejects it.
	bad := strings.ReplaceAll(other, "DCGM_FI_DEV_SM_CLOCK", MetricPowerUsage)
	if _, _, ok := parseTextFast([]byte(bad), scrapeTime); ok {
		t.Fatalf("fast path accepted a malformed %s line", MetricPowerUsage)
	}
	if _, err := ParseExporterText([]byte(bad), scrapeTime); err == nil {
		t.Fatalf("ParseExporterText accepted a malformed %s line", MetricPowerUsage)
	}
}

// FuzzParseTextFastMatchesExpfmt is the differential test. Whenever the fast
// path accepts a page, expfmt must accept the page's lines of the families
// in Metrics (storedLines) and yield the same samples or the same
// sample-level error; and whenever expfmt parses the whole page, its answer
// must be the fast path's too.
func FuzzParseTextFastMatchesExpfmt(f *testing.F) {
	inputs, _ := filepath.Glob(filepath.Join("testdata", "exporter", "*.prom"))
	for _, in := range inputs {
		b, err := os.ReadFile(in)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(exporterPage(3))
	f.Add([]byte("# HELP DCGM_FI_DEV_FB_USED x\n# TYPE DCGM_FI_DEV_FB_USED gauge\nDCGM_FI_DEV_FB_USED{UUID=\"a\",gpu=\"1\"} 1e3 1700000000000\n\n"))
	f.Add([]byte("# TYPE DCGM_FI_DEV_SM_CLOCK gauge\nDCGM_FI_DEV_SM_CLOCK{UUID=\"a\",gpu=\"1\"} 1\nDCGM_FI_DEV_SM_CLOCK{UUID=\"a\" x\n" +
		"DCGM_FI_DEV_FB_USED{UUID=\"a\",gpu=\"1\"} 7\n"))
	f.Fuzz(func(t *testing.T, page []byte) {
		got, err, ok := parseTextFast(page, scrapeTime)
		if !ok {
			return
		}
		same := func(what string, want []schedloop.GPUSample, wantErr error) {
			t.Helper()
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("page %q: fast path err %v, expfmt (%s) err %v", page, err, what, wantErr)
			}
			if err != nil && err.Error() != wantErr.Error() {
				t.Fatalf("page %q: fast path err %q, expfmt (%s) err %q", page, err, what, wantErr)
			}
			if !sameSamples(got, want) {
				t.Fatalf("page %q:\nfast   %+v\nexpfmt (%s) %+v", page, got, what, want)
			}
		}
		stored := storedLines(page)
		checkInventory(t, stored)
		want, wantErr := parseWithExpfmt(stored, scrapeTime)
		if wantErr != nil && err == nil {
			t.Fatalf("fast path accepted %q, expfmt rejects its stored families %q: %v", page, stored, wantErr)
		}
		same("stored families", want, wantErr)
		if want, wantErr := parseWithExpfmt(page, scrapeTime); wantErr == nil || !isExpositionError(wantErr) {
			same("whole page", want, wantErr)
		}
	})
}

// isExpositionError tells expfmt's rejection of a page from a sample-level
// error about a page it read.
func isExpositionError(err error) bool {
	return strings.HasPrefix(err.Error(), "parse text exposition: ")
}

// TestFastTextRemembersLabelSets checks that label sets remembered from an
// earlier page change nothing: the same page parses the same, and a line
// that starts with a remembered set but is malformed after it is still
// refused.
func TestFastTextRemembersLabelSets(t *testing.T) {
	page := exporterPage(8)
	first, err, ok := parseTextFast(page, scrapeTime)
	if !ok || err != nil {
		t.Fatalf("fast path: ok %v, err %v", ok, err)
	}
	again, err, ok := parseTextFast(page, scrapeTime)
	if !ok || err != nil || !sameSamples(first, again) {
		t.Fatalf("second parse: ok %v, err %v, same %v", ok, err, sameSamples(first, again))
	}
	line, _, _ := bytes.Cut(page[bytes.Index(page, []byte("\n"+MetricGPUUtil+"{"))+1:], []byte("\n"))
	for _, tail := range []string{" 5 }", "} 5", " {5}", "x 5"} {
		bad := string(line[:bytes.LastIndexByte(line, '}')+1]) + tail + "\n"
		if _, _, ok := parseTextFast([]byte(bad), scrapeTime); ok {
			t.Errorf("fast path accepted %q", bad)
		}
	}
}

// legacySet is the sample set as it was when every page built maps for its
// series and models: the reference for the inventory, whose order depends
// on the order samples were added.
type legacySet struct {
	index   map[seriesKey]int
	samples []schedloop.GPUSample
	models  map[string]string
}

func (s *legacySet) add(metric string, label labelFunc, v float64, t time.Time) error {
	var probe schedloop.GPUSample
	if !setField(&probe, metric, v) {
		return nil
	}
	uuid := label(labelUUID)
	if uuid == "" {
		return missingUUID(metric)
	}
	k := seriesKey{uuid: uuid, gpuInstance: label(labelGPUInstance), unixMilli: t.UnixMilli()}
	k.namespace, k.pod, k.container = label(exportedPrefix+labelNamespace), label(exportedPrefix+labelPod), label(exportedPrefix+labelContainer)
	if k.namespace == "" && k.pod == "" && k.container == "" {
		k.namespace, k.pod, k.container = label(labelNamespace), label(labelPod), label(labelContainer)
	}
	i, ok := s.index[k]
	if !ok {
		idx := -1
		if g := label(labelGPU); g != "" {
			n, err := strconv.Atoi(g)
			if err != nil || n < 0 {
				return fmt.Errorf("metric %s GPU %s: label %s=%q is not a GPU index", metric, uuid, labelGPU, g)
			}
			idx = n
		}
		s.samples = append(s.samples, schedloop.GPUSample{Time: t, GPUUUID: uuid, Node: label(labelHostname), GPUIndex: idx,
			PodNamespace: k.namespace, PodName: k.pod, Container: k.container})
		i = len(s.samples) - 1
		s.index[k] = i
		if _, ok := s.models[uuid]; !ok {
			s.models[uuid] = label(labelModel)
		}
	}
	setField(&s.samples[i], metric, v)
	return nil
}

func (s *legacySet) inventory() []schedloop.GPU {
	seen := map[string]bool{}
	var out []schedloop.GPU
	for _, g := range s.samples {
		if seen[g.GPUUUID] || g.GPUIndex < 0 || g.Node == "" {
			continue
		}
		seen[g.GPUUUID] = true
		out = append(out, schedloop.GPU{UUID: g.GPUUUID, Node: g.Node, Index: g.GPUIndex, Model: s.models[g.GPUUUID]})
	}
	return out
}

// legacyFromFamilies is setFromFamilies on a legacySet.
func legacyFromFamilies(fams []*dto.MetricFamily, at time.Time) (*legacySet, error) {
	s := &legacySet{index: map[seriesKey]int{}, models: map[string]string{}}
	for _, mf := range fams {
		for _, m := range mf.GetMetric() {
			v, ok := metricValue(m)
			if !ok {
				continue
			}
			t := at
			if m.TimestampMs != nil {
				t = time.UnixMilli(m.GetTimestampMs())
			}
			label := func(name string) string {
				for _, p := range m.GetLabel() {
					if p.GetName() == name {
						return p.GetValue()
					}
				}
				return ""
			}
			if err := s.add(mf.GetName(), label, v, t); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// checkInventory compares the inventory of page, on the fast path and on
// expfmt's, with the legacy set's.
func checkInventory(t *testing.T, page []byte) {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return
	}
	var fams []*dto.MetricFamily
	for _, name := range Metrics {
		if mf, ok := byName[name]; ok {
			fams = append(fams, mf)
		}
	}
	legacy, err := legacyFromFamilies(fams, scrapeTime)
	if err != nil {
		return
	}
	want := legacy.inventory()
	set, err := setFromFamilies(fams, scrapeTime)
	if err != nil {
		t.Fatalf("page %q: legacy set took it, setFromFamilies: %v", page, err)
	}
	if got := set.inventory(); !reflect.DeepEqual(got, want) {
		t.Fatalf("page %q: inventory via expfmt\n%+v\nlegacy\n%+v", page, got, want)
	}
	if got := set.sorted(); !sameSamples(got, slices.SortedFunc(slices.Values(legacy.samples), compareSamples)) {
		t.Fatalf("page %q: samples via expfmt\n%+v\nlegacy\n%+v", page, got, legacy.samples)
	}
	if fast, err, ok := parseTextFastSet(page, scrapeTime); ok && err == nil {
		if got := fast.inventory(); !reflect.DeepEqual(got, want) {
			t.Fatalf("page %q: inventory via the fast path\n%+v\nlegacy\n%+v", page, got, want)
		}
	}
}

// TestInventoryMatchesLegacy covers pages with more GPUs than the small
// set's linear scans, MIG instances and time-sliced GPUs.
func TestInventoryMatchesLegacy(t *testing.T) {
	def, trimmed := harnessPages(t)
	checkInventory(t, def)
	checkInventory(t, trimmed)
	for _, gpus := range []int{1, 8, smallSet, smallSet + 1, 70, 200} {
		checkInventory(t, exporterPage(gpus))
	}
	var b strings.Builder
	b.WriteString("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
	for i := range 80 {
		fmt.Fprintf(&b, "DCGM_FI_DEV_GPU_UTIL{gpu=\"%d\",UUID=\"GPU-%d\",GPU_I_ID=\"%d\",modelName=\"m%d\",Hostname=\"h\",pod=\"p%d\"} %d\n",
			i/7, i/7, i%7, i, i%3, i)
	}
	checkInventory(t, []byte(b.String()))
}
