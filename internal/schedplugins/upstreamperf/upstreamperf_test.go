// Package upstreamperf_test is the upstream yardstick: kube-scheduler's own
// performance cases (test/integration/scheduler_perf of the k8s.io/kubernetes
// module, read from the module as vendored by go.mod) run with schedloop's
// profile and with the default profile, one after the other in one run, and
// reported as schedloop's pods/s over the default's.
//
// The cases are SchedulingBasic (lone pods on plain nodes) and the
// Workload API's GangScheduling (gangs of -upstream.gang pods) and
// BasicScheduling (pod groups with the basic policy), resized to
// -upstream.nodes nodes and -upstream.pods measured pods. Both sides see the
// same cluster, objects and scheduler_perf's SchedulingThroughput (pods
// scheduled per second while the measured pods are created and placed).
// schedloop's side is deploy/scheduler-config.yaml with its profile renamed
// default-scheduler, the name scheduler_perf's pods ask for, and the
// plugins registered through scheduler_perf's out-of-tree registry. It has
// no scheduler-plugins PodGroup CRD to watch: its gang manager waits up to
// 30 s for that informer at start-up, outside the measured phase.
//
// It only runs as a benchmark (`make bench`); `go test` runs nothing here.
// scheduler_perf starts etcd from the PATH: where none is found, the
// benchmark builds one from the go.etcd.io/etcd/server/v3 module of go.mod.
package upstreamperf_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	_ "k8s.io/component-base/logs/json/register"
	perf "k8s.io/kubernetes/test/integration/scheduler_perf"

	"github.com/schedloop/schedloop/internal/schedplugins"
)

var (
	nodes = flag.Int("upstream.nodes", 500, "nodes of every case")
	pods  = flag.Int("upstream.pods", 1000, "measured pods of every case (gang cases: rounded down to whole gangs)")
	gang  = flag.Int("upstream.gang", 3, "pods per group in the pod-group cases")
	cases = flag.String("upstream.cases", "SchedulingBasic,GangScheduling,BasicScheduling", "comma-separated upstream case names to run")
)

func TestMain(m *testing.M) {
	// Registers scheduler_perf's flags next to the test's and parses them.
	if err := perf.InitTests(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// upstream is where each case is defined in scheduler_perf, relative to its
// directory.
var upstream = map[string]string{
	"SchedulingBasic": "misc/performance-config.yaml",
	"GangScheduling":  "podgroup/gangscheduling/performance-config.yaml",
	"BasicScheduling": "podgroup/basicscheduling/performance-config.yaml",
}

// Profiles, in the order they run.
var profiles = []string{"default", "schedloop"}

func BenchmarkUpstreamPerf(b *testing.B) {
	ensureEtcd(b)
	dir := b.TempDir()
	cfg := writeSchedloopConfig(b, dir)
	perfDir := moduleDir(b) + "/test/integration/scheduler_perf"
	var out []map[string]any
	names := strings.Split(*cases, ",")
	for _, name := range names {
		file, ok := upstream[name]
		if !ok {
			b.Fatalf("-upstream.cases: unknown case %q (known: SchedulingBasic, GangScheduling, BasicScheduling)", name)
		}
		tc := upstreamCase(b, filepath.Join(perfDir, file), name)
		for _, p := range profiles {
			c := resized(tc, name)
			c["name"] = name + "_" + p
			delete(c, "schedulerConfigPath")
			if p == "schedloop" {
				c["schedulerConfigPath"] = cfg
			}
			out = append(out, c)
		}
	}
	raw, err := yaml.Marshal(out)
	if err != nil {
		b.Fatal(err)
	}
	config := filepath.Join(dir, "performance-config.yaml")
	if err := os.WriteFile(config, raw, 0o600); err != nil {
		b.Fatal(err)
	}
	// Data items (and -perf-cpuprofile's profiles) go to -data-items-dir,
	// else to a directory of this run.
	items := flag.Lookup("data-items-dir").Value.String()
	if items == "" {
		items = filepath.Join(dir, "items")
		if err := flag.Set("data-items-dir", items); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.MkdirAll(items, 0o700); err != nil {
		b.Fatal(err)
	}
	// Each case logs to a file of its own there, deleted when it passes,
	// instead of into the benchmark's output.
	b.Setenv("ARTIFACTS", dir)

	// The cases are sub-benchmarks, each run once: a parent benchmark's
	// body runs once whatever -benchtime says.
	perf.RunBenchmarkPerfScheduling(b, config, "schedloop", schedplugins.NewSet().Registry())

	rates := throughputs(b, items)
	b.Run("ratio", func(b *testing.B) {
		for b.Loop() {
		}
		for _, name := range names {
			def, ours := median(rates[name+"_default"]), median(rates[name+"_schedloop"])
			if def <= 0 || ours <= 0 {
				b.Fatalf("%s: no SchedulingThroughput for both profiles (default %v, schedloop %v pods/s)",
					name, rates[name+"_default"], rates[name+"_schedloop"])
			}
			b.Logf("%s at %d nodes, %d pods: default %.1f pods/s (of %v), schedloop %.1f pods/s (of %v)",
				name, *nodes, *pods, def, rates[name+"_default"], ours, rates[name+"_schedloop"])
			b.ReportMetric(ours/def, "upstream_perf_"+name+"_ratio@ratio")
		}
	})
}

// upstreamCase reads one test case of a scheduler_perf configuration file,
// its relative paths made absolute.
func upstreamCase(b *testing.B, file, name string) map[string]any {
	raw, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	var all []map[string]any
	if err := yaml.Unmarshal(raw, &all); err != nil {
		b.Fatalf("%s: %v", file, err)
	}
	for _, tc := range all {
		if tc["name"] == name {
			absPaths(tc, filepath.Dir(file))
			return tc
		}
	}
	b.Fatalf("%s: no test case %q", file, name)
	return nil
}

// absPaths makes every relative *Path value under v absolute against dir,
// as scheduler_perf reads them relative to the configuration's package.
func absPaths(v any, dir string) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if s, ok := val.(string); ok && strings.HasSuffix(k, "Path") && !filepath.IsAbs(s) {
				x[k] = filepath.Join(dir, s)
				continue
			}
			absPaths(val, dir)
		}
	case []any:
		for _, e := range x {
			absPaths(e, dir)
		}
	}
}

// resized is tc with one workload of this run's size.
func resized(tc map[string]any, name string) map[string]any {
	c := map[string]any{}
	for k, v := range tc {
		c[k] = v
	}
	var params map[string]any
	if name == "SchedulingBasic" {
		params = map[string]any{"initNodes": *nodes, "initPods": *nodes, "measurePods": *pods}
	} else {
		params = map[string]any{"initNodes": *nodes, "initPodGroups": max(*pods / *gang, 1), "podsPerGroup": *gang}
	}
	c["workloads"] = []any{map[string]any{
		"name":   fmt.Sprintf("%dNodes_%dPods", *nodes, *pods),
		"labels": []any{"performance"},
		"params": params,
	}}
	return c
}

// median of v; 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// throughputs reads each case's average SchedulingThroughput from the data
// items scheduler_perf wrote, one per run: -count repeats each case (a
// sub-benchmark) that many times in a row, and the ratio is of the medians.
func throughputs(b *testing.B, dir string) map[string][]float64 {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no data items in %s (%v)", dir, err)
	}
	out := map[string][]float64{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		var items struct {
			DataItems []struct {
				Data   map[string]float64 `json:"data"`
				Labels map[string]string  `json:"labels"`
			} `json:"dataItems"`
		}
		if err := json.Unmarshal(raw, &items); err != nil {
			b.Fatalf("%s: %v", f, err)
		}
		for _, it := range items.DataItems {
			if it.Labels["Metric"] != "SchedulingThroughput" {
				continue
			}
			// Name is <benchmark>/<case>/<workload>/<op>.
			parts := strings.Split(it.Labels["Name"], "/")
			for _, p := range parts {
				for name := range upstream {
					for _, prof := range profiles {
						if p == name+"_"+prof {
							out[p] = append(out[p], it.Data["Average"])
						}
					}
				}
			}
		}
	}
	return out
}

// writeSchedloopConfig writes the shipped scheduler configuration with its
// profile serving scheduler_perf's pods.
func writeSchedloopConfig(b *testing.B, dir string) string {
	raw, err := os.ReadFile("../../../deploy/scheduler-config.yaml")
	if err != nil {
		b.Fatal(err)
	}
	const profile = "- schedulerName: schedloop\n"
	shipped := string(raw)
	if strings.Count(shipped, profile) != 1 {
		b.Fatalf("deploy/scheduler-config.yaml: want exactly one %q", strings.TrimSpace(profile))
	}
	path := filepath.Join(dir, "schedloop-config.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(shipped, profile, "- schedulerName: default-scheduler\n", 1)), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

func moduleDir(b *testing.B) string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		b.Fatalf("locate the k8s.io/kubernetes module: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// ensureEtcd puts an etcd on the PATH for scheduler_perf, built from the
// etcd server module go.mod requires where the PATH has none.
func ensureEtcd(b *testing.B) {
	if _, err := exec.LookPath("etcd"); err == nil {
		return
	}
	dir, err := os.MkdirTemp("", "upstreamperf-etcd")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "etcd"), "go.etcd.io/etcd/server/v3")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build etcd: %v\n%s", err, out)
	}
	b.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}
