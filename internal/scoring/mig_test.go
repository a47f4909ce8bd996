package scoring

import (
	"strings"
	"testing"
)

func TestMIGMilli(t *testing.T) {
	for _, tc := range []struct {
		profile string
		models  []string
		want    int64
		err     string
	}{
		{"1g.10gb", []string{"NVIDIA-H100-80GB-HBM3"}, 142, ""},
		{"3g.40gb", []string{"NVIDIA-A100-SXM4-80GB"}, 428, ""},
		{"7g.80gb", []string{"NVIDIA-A100-SXM4-80GB"}, 1000, ""},
		{"1g.6gb", []string{"NVIDIA-A30"}, 250, ""},
		{"2g.12gb", []string{"NVIDIA-A30"}, 500, ""},
		{"1c.2g.20gb", []string{"NVIDIA-A100-SXM4-80GB"}, 285, ""},
		{"1g.10gb+me", nil, 142, ""},
		// Unknown before placement: any model, or models of differing
		// geometry, read as seven slices.
		{"1g.10gb", nil, 142, ""},
		{"1g.6gb", []string{"NVIDIA-A30", "NVIDIA-A100-SXM4-80GB"}, 142, ""},
		{"1g.6gb", []string{"NVIDIA-A30", "NVIDIA-A30-PCIE"}, 250, ""},
		{"1g.5gb", []string{"some future GPU"}, 142, ""},
		{MIGAnyProfile, nil, 142, ""},
		{MIGAnyProfile, []string{"NVIDIA-A30"}, 250, ""},
		{"7g.80gb", []string{"NVIDIA-A30"}, 0, "7 compute slices, but the GPU it is asked of has 4"},
		{"big", nil, 0, "no \"<n>g\""},
		{"0g.5gb", nil, 0, "0 compute slices"},
	} {
		got, err := MIGMilli(tc.profile, tc.models)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || got != 0 {
				t.Errorf("MIGMilli(%q, %q) = %d, %v; want 0 and an error containing %q", tc.profile, tc.models, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("MIGMilli(%q, %q) = %d, %v; want %d", tc.profile, tc.models, got, err, tc.want)
		}
	}
}

// The instances that fill one GPU never count for more than the GPU: a
// one-GPU queue limit admits them all, and refuses one slice more.
func TestMIGInstancesOfOneGPUFillAOneGPULimit(t *testing.T) {
	for _, tc := range []struct {
		model    string
		profiles []string
	}{
		{"NVIDIA-A100-SXM4-80GB", []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}},
		{"NVIDIA-H100-80GB-HBM3", []string{"3g.40gb", "4g.40gb"}},
		{"NVIDIA-A30", []string{"1g.6gb", "1g.6gb", "1g.6gb", "1g.6gb"}},
		{"NVIDIA-A30", []string{"2g.12gb", "2g.12gb"}},
	} {
		limit := QueueLimit{MaxGPUs: 1}
		var used QueueUsage
		for i, p := range tc.profiles {
			r := Request{GPUModels: []string{tc.model}, MIG: map[string]int{p: 1}}
			if !QueueAdmits(limit, used, r.CountedMilli(), false) {
				t.Fatalf("%s %v: instance %d refused at %d milli-GPU used", tc.model, tc.profiles, i+1, used.GPUMilli)
			}
			used.GPUMilli += r.CountedMilli()
		}
		extra := Request{GPUModels: []string{tc.model}, MIG: map[string]int{"1g.5gb": 1}}
		if QueueAdmits(limit, used, extra.CountedMilli(), false) {
			t.Errorf("%s %v: a slice beyond the GPU admitted at %d milli-GPU used", tc.model, tc.profiles, used.GPUMilli)
		}
	}
}

func TestCountedMilli(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Request
		want int64
	}{
		{"nil MIG", Request{GPUs: 2}, 2000},
		{"empty MIG", Request{GPUs: 1, GPUMilli: 250, MIG: map[string]int{}}, 250},
		{"zero count", Request{MIG: map[string]int{"3g.40gb": 0}}, 0},
		{"negative count", Request{MIG: map[string]int{"3g.40gb": -2}}, 0},
		{"instances beside whole GPUs", Request{GPUs: 1, MIG: map[string]int{"1g.10gb": 2, "2g.20gb": 1}}, 1000 + 2*142 + 285},
		{"claimed instances of any profile", Request{MIG: map[string]int{MIGAnyProfile: 3}}, 3 * 142},
		{"unreadable profile counts nothing", Request{MIG: map[string]int{"big": 1, "1g.10gb": 1}}, 142},
	} {
		if got := tc.r.CountedMilli(); got != tc.want {
			t.Errorf("%s: CountedMilli = %d, want %d", tc.name, got, tc.want)
		}
	}
	if err := (Request{MIG: map[string]int{"big": 1}}).Validate(); err == nil || !strings.Contains(err.Error(), "mig[big]") {
		t.Errorf("Validate of an unreadable profile: %v", err)
	}
	if err := (Request{MIG: map[string]int{"1g.10gb": -1}}).Validate(); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("Validate of a negative count: %v", err)
	}
}

func TestMIGFitAllocateRelease(t *testing.T) {
	n := NewNode("n", "NVIDIA-A100-SXM4-80GB", 1, 8000, 1<<16)
	n.MIGCap = map[string]int{"1g.10gb": 3, "3g.40gb": 1}
	n.MIGFree = map[string]int{"1g.10gb": 3, "3g.40gb": 1}
	two := Request{MIG: map[string]int{"1g.10gb": 2}}
	if got := Capacity(n, two); got != 1 {
		t.Errorf("Capacity for two 1g = %d, want 1", got)
	}
	a, err := n.Allocate(two, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n.MIGFree["1g.10gb"] != 1 || n.Fit(two) != ReasonMIG {
		t.Errorf("after one allocation: free %v, fit %q; want 1 left and %q", n.MIGFree, n.Fit(two), ReasonMIG)
	}
	if r := (Request{MIG: map[string]int{"2g.20gb": 1}}); n.Fit(r) != ReasonMIG {
		t.Errorf("a profile the node does not have: fit %q", n.Fit(r))
	}
	if r := (Request{MIG: map[string]int{MIGAnyProfile: 5}}); n.Fit(r) != Fits {
		t.Errorf("claimed instances, placed by the DynamicResources plugin: fit %q", n.Fit(r))
	}
	if r := (Request{GPUModels: []string{"NVIDIA-A30"}, MIG: map[string]int{"1g.10gb": 1}}); n.Fit(r) != ReasonGPUModel {
		t.Errorf("instances of a model the node lacks: fit %q", n.Fit(r))
	}
	c := n.Clone()
	c.Release(a)
	if n.MIGFree["1g.10gb"] != 1 || c.MIGFree["1g.10gb"] != 3 {
		t.Errorf("release on a clone: node %v, clone %v", n.MIGFree, c.MIGFree)
	}
	c.Release(a)
	if c.MIGFree["1g.10gb"] != 3 {
		t.Errorf("released twice: %v, want capped at 3", c.MIGFree)
	}
}
