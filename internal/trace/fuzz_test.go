package trace

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// seed adds every testdata input of one parser to the fuzz corpus.
func seed(f *testing.F, dir string) {
	inputs, _ := filepath.Glob(filepath.Join("testdata", dir, "*"))
	for _, in := range inputs {
		if filepath.Ext(in) == ".golden" {
			continue
		}
		if b, err := os.ReadFile(in); err == nil {
			f.Add(b)
		}
	}
}

// fuzzParser checks that a parser never panics and that whatever it accepts
// passes validation.
func fuzzParser(f *testing.F, dir string) {
	seed(f, dir)
	parse := parsers[dir]
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		switch v := v.(type) {
		case []Job:
			for _, j := range v {
				if err := j.Validate(); err != nil {
					t.Fatalf("accepted an invalid job: %v", err)
				}
			}
			if dir == "jobs_csv" {
				roundTrip(t, v)
			}
		case []Node:
			for _, n := range v {
				if err := n.Validate(); err != nil {
					t.Fatalf("accepted an invalid node: %v", err)
				}
			}
		case Inventory:
			for _, n := range v.Nodes {
				if err := n.Validate(); err != nil {
					t.Fatalf("accepted an invalid node: %v", err)
				}
			}
		}
	})
}

// roundTrip checks that jobs the CSV reader accepted come back equal,
// MIG instances included, through WriteJobsCSV; jobs it cannot write (a
// comma in a name) are skipped.
func roundTrip(t *testing.T, jobs []Job) {
	var b bytes.Buffer
	if err := WriteJobsCSV(&b, jobs); err != nil {
		return
	}
	back, err := ReadJobsCSV(&b)
	if err != nil {
		t.Fatalf("written jobs do not read back: %v\n%s", err, b.String())
	}
	if len(back) != len(jobs) {
		t.Fatalf("%d jobs written, %d read back", len(jobs), len(back))
	}
	for i := range jobs {
		if !reflect.DeepEqual(back[i], jobs[i]) {
			t.Fatalf("job %d round trip:\n got %+v\nwant %+v", i, back[i], jobs[i])
		}
	}
}

func FuzzReadOpenbPods(f *testing.F)      { fuzzParser(f, "openb_pods") }
func FuzzReadOpenbShapes(f *testing.F)    { fuzzParser(f, "openb_shapes") }
func FuzzReadOpenbNodes(f *testing.F)     { fuzzParser(f, "openb_nodes") }
func FuzzReadFGDResults(f *testing.F)     { fuzzParser(f, "fgd_results") }
func FuzzReadPhillyJobs(f *testing.F)     { fuzzParser(f, "philly_jobs") }
func FuzzReadPhillyMachines(f *testing.F) { fuzzParser(f, "philly_machines") }
func FuzzReadJobsCSV(f *testing.F)        { fuzzParser(f, "jobs_csv") }
func FuzzReadJobsYAML(f *testing.F)       { fuzzParser(f, "jobs_yaml") }
func FuzzReadInventory(f *testing.F)      { fuzzParser(f, "inventory") }
