package profile

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/schedloop/schedloop"
)

var update = flag.Bool("update", false, "rewrite the golden files from the current output")

// TestParseGolden parses every testdata/*.yaml; each .golden holds either the
// parsed document re-marshalled, or "error: ..." for inputs that must fail.
func TestParseGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var got string
			if d, err := Parse(data); err != nil {
				got = "error: " + err.Error() + "\n"
			} else {
				out, err := d.Marshal()
				if err != nil {
					t.Fatal(err)
				}
				got = string(out)
			}
			golden := strings.TrimSuffix(in, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("Parse(%s):\n got: %s\nwant: %s", in, got, want)
			}
		})
	}
}

func TestErrorsNameTheField(t *testing.T) {
	tests := map[string]string{
		"unknown-field.yaml":        `unknown field "weigths"`,
		"unknown-term.yaml":         "weights.gravity: unknown score term",
		"weight-out-of-range.yaml":  "weights.binpack: 500 is outside 0..100",
		"negative-queue.yaml":       "queues.research.maxGPUs: -8 is negative",
		"bad-queue-name.yaml":       "queues.Research_Team: not a valid queue name",
		"timeout-out-of-range.yaml": "gangTimeoutSeconds: 999999 is outside 0..86400",
		"wrong-version.yaml":        `apiVersion: "schedloop.io/v2" is not "schedloop.io/v1"`,
		"missing-name.yaml":         "name: missing",
		"empty.yaml":                "document is empty",
	}
	for file, want := range tests {
		data, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(data); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want it to contain %q", file, err, want)
		}
	}
}

func TestDomainRoundTrip(t *testing.T) {
	data, err := os.ReadFile("testdata/valid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	p := d.ToDomain()
	if p.QueueLimits["research"] != (schedloop.QueueLimit{MaxGPUs: 64, MaxRunningGang: 4}) || p.GangTimeoutSeconds != 300 {
		t.Errorf("ToDomain = %+v", p)
	}
	if back := FromDomain(p); !reflect.DeepEqual(back, d) {
		t.Errorf("FromDomain(ToDomain(d)) = %+v, want %+v", back, d)
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("the default profile is invalid: %v", err)
	}
}

// Params and FromParams are the only conversions between the document and
// the parameters both sides read; neither may lose a field.
func TestParamsRoundTrip(t *testing.T) {
	for _, name := range []string{"valid.yaml", "policies.yaml"} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		d, err := Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		if back := FromParams(d.Name, d.Params()); !reflect.DeepEqual(back, d) {
			t.Errorf("%s: FromParams(Params(d)) = %+v, want %+v", name, back, d)
		}
	}
}

func TestDiff(t *testing.T) {
	old := Document{Weights: map[string]float64{"spread": 3, "topology": 10}, Queues: map[string]Queue{"a": {MaxGPUs: 8}, "b": {MaxGPUs: 4}},
		GangTimeoutSeconds: 60}
	new := Document{Weights: map[string]float64{"binpack": 3, "topology": 10}, Queues: map[string]Queue{"a": {MaxGPUs: 16, MaxRunningGangs: 2}, "c": {MaxGPUs: 1}},
		GangTimeoutSeconds: 120}
	want := []string{
		"weights.binpack: 0 -> 3",
		"weights.spread: 3 -> 0",
		"queues.a.maxGPUs: 8 -> 16",
		"queues.a.maxRunningGangs: 0 -> 2",
		"queues.b: removed (was maxGPUs 4)",
		"queues.c: added (maxGPUs 1, maxRunningGangs 0)",
		"gangTimeoutSeconds: 60 -> 120",
	}
	if got := Diff(old, new); !reflect.DeepEqual(got, want) {
		t.Errorf("Diff =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := Diff(new, new); len(got) != 0 {
		t.Errorf("Diff of equal documents = %v", got)
	}
}

func FuzzParse(f *testing.F) {
	inputs, _ := filepath.Glob("testdata/*.yaml")
	for _, in := range inputs {
		data, _ := os.ReadFile(in)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever parses must survive a marshal/parse round trip unchanged.
		out, err := d.Marshal()
		if err != nil {
			t.Fatalf("marshal a valid document: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of marshalled document failed: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(d, again) {
			t.Fatalf("round trip changed the document:\n%+v\n%+v", d, again)
		}
	})
}
