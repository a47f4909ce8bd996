package trace

import (
	"bytes"
	"os"
	"path/filepath"
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

func FuzzReadOpenbPods(f *testing.F)      { fuzzParser(f, "openb_pods") }
func FuzzReadOpenbShapes(f *testing.F)    { fuzzParser(f, "openb_shapes") }
func FuzzReadOpenbNodes(f *testing.F)     { fuzzParser(f, "openb_nodes") }
func FuzzReadFGDResults(f *testing.F)     { fuzzParser(f, "fgd_results") }
func FuzzReadPhillyJobs(f *testing.F)     { fuzzParser(f, "philly_jobs") }
func FuzzReadPhillyMachines(f *testing.F) { fuzzParser(f, "philly_machines") }
func FuzzReadJobsCSV(f *testing.F)        { fuzzParser(f, "jobs_csv") }
func FuzzReadJobsYAML(f *testing.F)       { fuzzParser(f, "jobs_yaml") }
func FuzzReadInventory(f *testing.F)      { fuzzParser(f, "inventory") }
