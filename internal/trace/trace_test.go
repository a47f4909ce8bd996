package trace

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// parsers maps a testdata folder to the parser whose inputs it holds.
var parsers = map[string]func(io.Reader) (any, error){
	"openb_pods":      func(r io.Reader) (any, error) { return ReadOpenbPods(r) },
	"openb_shapes":    func(r io.Reader) (any, error) { return ReadOpenbShapes(r) },
	"openb_nodes":     func(r io.Reader) (any, error) { return ReadOpenbNodes(r) },
	"fgd_results":     func(r io.Reader) (any, error) { return ReadFGDResults(r) },
	"philly_jobs":     func(r io.Reader) (any, error) { return ReadPhillyJobs(r) },
	"philly_machines": func(r io.Reader) (any, error) { return ReadPhillyMachines(r) },
	"jobs_csv":        func(r io.Reader) (any, error) { return ReadJobsCSV(r) },
	"jobs_yaml":       func(r io.Reader) (any, error) { return ReadJobsYAML(r) },
	"inventory":       func(r io.Reader) (any, error) { return ReadInventory(r) },
}

// TestGolden parses every input under testdata/<parser>/ and compares the
// result (or the error) with the .golden file beside it. Inputs named bad_*
// must fail.
func TestGolden(t *testing.T) {
	for dir, parse := range parsers {
		inputs, err := filepath.Glob(filepath.Join("testdata", dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, in := range inputs {
			if strings.HasSuffix(in, ".golden") {
				continue
			}
			n++
			t.Run(dir+"/"+filepath.Base(in), func(t *testing.T) {
				f, err := os.Open(in)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				v, err := parse(f)
				bad := strings.HasPrefix(filepath.Base(in), "bad_")
				var got []byte
				switch {
				case err != nil && !bad:
					t.Fatalf("parse: %v", err)
				case err == nil && bad:
					t.Fatalf("parse succeeded, want an error")
				case err != nil:
					got = []byte("error: " + err.Error() + "\n")
				default:
					if got, err = json.MarshalIndent(v, "", "  "); err != nil {
						t.Fatal(err)
					}
					got = append(got, '\n')
				}
				golden := in + ".golden"
				if *update {
					if err := os.WriteFile(golden, got, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test -update to create it)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from %s:\n got: %s\nwant: %s", in, golden, got, want)
				}
			})
		}
		if n == 0 {
			t.Errorf("no inputs under testdata/%s", dir)
		}
	}
}

func TestErrorsNameLineFieldAndValue(t *testing.T) {
	cases := []struct {
		name, in string
		read     func(io.Reader) (any, error)
		want     string
	}{
		{"openb num_gpu", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\np,1,1,1,0,0,1\np2,1,1,x,0,0,1\n",
			parsers["openb_pods"], `line 3: field num_gpu: "x" is not an integer`},
		{"jobs csv arrival", "name,arrival_s,duration_s,gpus_per_member\nj,soon,1,1\n",
			parsers["jobs_csv"], `line 2: field arrival_s: "soon" is not a number`},
		{"philly gpus", "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,1,two,0,vc\n",
			parsers["philly_jobs"], `line 2: field num_gpus: "two" is not an integer`},
		{"inventory count", "groups:\n- namePrefix: g\n  count: -1\n",
			parsers["inventory"], `groups[0]: field count: -1 is outside`},
		// Bounds on what outside input may make the tuner allocate.
		{"jobs yaml gang size", "jobs:\n- name: j\n  gangSize: 1000000000\n  gpusPerMember: 1\n",
			parsers["jobs_yaml"], `jobs[0]: job j: field gang_size: 1000000000 is above 10000`},
		{"jobs csv gang size", "name,arrival_s,duration_s,gpus_per_member,gang_size\nj,1,1,1,1000000000\n",
			parsers["jobs_csv"], `line 2: field gang_size: 1000000000 is above 10000`},
		{"jobs yaml gpus", "jobs:\n- name: j\n  gpusPerMember: 3000000000\n",
			parsers["jobs_yaml"], `field gpus: 3000000000 is outside 0..1024`},
		{"jobs csv priority overflow", "name,arrival_s,duration_s,gpus_per_member,priority\nj,1,1,1,2147483648\n",
			parsers["jobs_csv"], `line 2: field priority: "2147483648" is not a 32-bit integer`},
		// Text Postgres refuses, named where it is.
		{"jobs csv NUL", "name,arrival_s,duration_s,gpus_per_member,queue\nj,1,1,1,q\nk,1,1,1,a\x00b\n",
			parsers["jobs_csv"], `line 3: field queue: "a\x00b" holds a NUL byte`},
		{"openb invalid UTF-8", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\np\xff,1,1,1,0,0,1\n",
			parsers["openb_pods"], `line 2: field name: "p\xff" is not valid UTF-8`},
		{"jobs yaml NUL", "jobs:\n- name: \"a\\0b\"\n  gpusPerMember: 1\n",
			parsers["jobs_yaml"], `jobs[0]: field name: "a\x00b" holds a control character`},
		// A truncated row is refused, not read with defaults.
		{"philly truncated", "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,1,2,0,vc\n2017-10-09 07:01:56,1\n",
			parsers["philly_jobs"], `line 3: has 2 fields, the header names 5 (num_gpus missing): a truncated row`},
		// Length limits.
		{"jobs csv long line", "name,arrival_s,duration_s,gpus_per_member,queue\nj,1,1,1," + strings.Repeat("q", MaxLineBytes) + "\n",
			parsers["jobs_csv"], `line 2: longer than 65536 bytes`},
		{"jobs csv long field", "name,arrival_s,duration_s,gpus_per_member,queue\nj,1,1,1," + strings.Repeat("q", MaxFieldBytes+1) + "\n",
			parsers["jobs_csv"], `line 2: field queue: longer than 4096 bytes`},
		{"jobs yaml long line", "jobs:\n- name: " + strings.Repeat("j", MaxLineBytes) + "\n",
			parsers["jobs_yaml"], `line 2: longer than 65536 bytes`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.read(strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestSplitGang(t *testing.T) {
	for _, c := range []struct{ gpus, members, per int }{
		{1, 1, 1}, {8, 1, 8}, {12, 2, 6}, {16, 2, 8}, {24, 3, 8}, {128, 16, 8}, {9, 3, 3},
	} {
		m, p := SplitGang(c.gpus, 8)
		if m != c.members || p != c.per {
			t.Errorf("SplitGang(%d, 8) = %d x %d, want %d x %d", c.gpus, m, p, c.members, c.per)
		}
	}
}

func TestAssignTopologySpreadsEvenly(t *testing.T) {
	nodes := make([]Node, 100)
	for i := range nodes {
		nodes[i].Name = fmt.Sprintf("n%d", i)
	}
	if err := AssignTopology(nodes, "gpu", DefaultLevels, []int{1, 2, 4}); err != nil {
		t.Fatal(err)
	}
	count := func(level string) map[string]int {
		m := map[string]int{}
		for _, n := range nodes {
			m[n.Labels[level]]++
		}
		return m
	}
	if got := count(LabelSpine); len(got) != 1 {
		t.Errorf("spines = %v, want 1", got)
	}
	if got := count(LabelRack); len(got) != 2 || got["rack-gpu-0-0"] != 50 || got["rack-gpu-0-1"] != 50 {
		t.Errorf("racks = %v, want 2 x 50", got)
	}
	domains := count(LabelNVLinkDomain)
	if len(domains) != 8 {
		t.Fatalf("domains = %v, want 8", domains)
	}
	for d, n := range domains {
		if n < 12 || n > 13 {
			t.Errorf("domain %s has %d nodes, want 12 or 13", d, n)
		}
	}
	// A domain never spans two racks.
	rackOf := map[string]string{}
	for _, n := range nodes {
		d, r := n.Labels[LabelNVLinkDomain], n.Labels[LabelRack]
		if prev, ok := rackOf[d]; ok && prev != r {
			t.Errorf("domain %s in racks %s and %s", d, prev, r)
		}
		rackOf[d] = r
		if n.Labels[LabelHostname] != n.Name {
			t.Errorf("node %s hostname label %q", n.Name, n.Labels[LabelHostname])
		}
	}
}

func TestGenerateIsSeeded(t *testing.T) {
	c := GenConfig{Seed: 7, Jobs: 50, IdleShare: 0.2, FailShare: 0.1}
	a, b := Generate(c), Generate(c)
	var ba, bb bytes.Buffer
	if err := WriteJobsCSV(&ba, a); err != nil {
		t.Fatal(err)
	}
	if err := WriteJobsCSV(&bb, b); err != nil {
		t.Fatal(err)
	}
	if ba.String() != bb.String() {
		t.Fatal("same seed gave different jobs")
	}
	back, err := ReadJobsCSV(&ba)
	if err != nil {
		t.Fatalf("read back generated CSV: %v", err)
	}
	if len(back) != 50 {
		t.Fatalf("read back %d jobs, want 50", len(back))
	}
	for i, j := range back {
		if err := j.Validate(); err != nil {
			t.Errorf("job %d: %v", i, err)
		}
		if j.Arrival != a[i].Arrival || j.Duration != a[i].Duration || j.Util != a[i].Util {
			t.Errorf("job %d round trip: got %+v want %+v", i, j, a[i])
		}
	}
}

// TestPhillySlice reads the committed Philly slice through LoadJobs and LoadInventory.
func TestPhillySlice(t *testing.T) {
	jobs, err := LoadJobs("testdata/philly/pollux_philly_head300.csv", FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 300 {
		t.Fatalf("%d jobs, want 300", len(jobs))
	}
	var first time.Duration = -1
	for _, j := range jobs {
		if err := j.Validate(); err != nil {
			t.Error(err)
		}
		if first < 0 || j.Arrival < first {
			first = j.Arrival
		}
	}
	if first != 0 {
		t.Errorf("earliest arrival %v, want 0", first)
	}
	inv, err := LoadInventory("testdata/philly/cluster_machine_list_head40.csv", FormatAuto, nil, []int{1, 2, 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Nodes) != 40 || inv.Nodes[0].GPUMemoryMiB != 12*1024 {
		t.Fatalf("inventory %d nodes, first %+v", len(inv.Nodes), inv.Nodes[0])
	}
}

// sharedTraces is where the public traces live, relative to this package.
var sharedTraces = flag.String("traces", "../../../shared/traces",
	"folder of the public traces (see ../shared/traces/README.md)")
var requireTraces = flag.Bool("require-traces", false, "fail when the public traces are missing")

// TestSharedTraces parses the full public traces. They are not part of the
// repository: without them this test only says so, unless -require-traces.
func TestSharedTraces(t *testing.T) {
	files := []struct {
		path  string
		nodes bool
		wantN int
	}{
		{"alibaba-gpu-2023/openb_pod_list_default.csv", false, 8152},
		{"alibaba-gpu-2023/openb_node_list_gpu_node.csv", true, 1213},
		{"alibaba-gpu-2023/openb_node_list_all_node.csv", true, 1523},
		{"philly/pollux_philly.csv", false, 82247},
		{"philly/cluster_machine_list.csv", true, 552},
	}
	for _, f := range files {
		path := filepath.Join(*sharedTraces, f.path)
		if _, err := os.Stat(path); err != nil {
			if *requireTraces {
				t.Fatalf("public trace %s is missing (%v): see ../shared/traces/README.md", path, err)
			}
			t.Logf("public trace %s not present; run with -require-traces to insist", path)
			continue
		}
		var n int
		if f.nodes {
			inv, err := LoadInventory(path, FormatAuto, nil, []int{2, 8, 4})
			if err != nil {
				t.Fatal(err)
			}
			n = len(inv.Nodes)
		} else {
			jobs, err := LoadJobs(path, FormatAuto)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				if err := j.Validate(); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
			}
			n = len(jobs)
		}
		if n != f.wantN {
			t.Errorf("%s: %d rows, want %d", path, n, f.wantN)
		}
	}
	// A five-column list: its shapes read, a replay of it refused with why.
	path := filepath.Join(*sharedTraces, "alibaba-gpu-2023/openb_pod_list_multigpu20.csv")
	if _, err := os.Stat(path); err != nil {
		t.Logf("public trace %s not present", path)
		return
	}
	if pods, err := LoadOpenbShapes(path); err != nil || len(pods) != 8324 {
		t.Errorf("%s: %d pods (%v), want 8324", path, len(pods), err)
	}
	if _, err := LoadJobs(path, FormatAuto); err == nil || !strings.Contains(err.Error(), "records no times") {
		t.Errorf("%s replayed without times: %v", path, err)
	}
}
