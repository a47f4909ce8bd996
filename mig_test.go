package schedloop

import (
	"math"
	"strings"
	"testing"
)

func TestMIGComputeShare(t *testing.T) {
	for _, tc := range []struct {
		model, profile string
		want           float64
		err            string
	}{
		{"NVIDIA A100-SXM4-80GB", "", 1, ""},
		{"NVIDIA A100-SXM4-40GB", "1g.5gb", 1.0 / 7, ""},
		{"NVIDIA A100-SXM4-80GB", "3g.40gb", 3.0 / 7, ""},
		{"NVIDIA H100 80GB HBM3", "7g.80gb", 1, ""},
		{"NVIDIA H100 80GB HBM3", "1g.10gb+me", 1.0 / 7, ""},
		{"NVIDIA H200", "1c.2g.35gb", 2.0 / 7, ""},
		{"NVIDIA A30", "2g.12gb", 0.5, ""},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", "1g.24gb", 0.25, ""},
		{"", "1g.10gb", 1.0 / 7, ""},
		{"NVIDIA A30", "7g.80gb", 0, "7 compute slices"},
		{"NVIDIA A100", "0g.5gb", 0, "0 compute slices"},
		{"NVIDIA A100", "big", 0, `MIG profile "big": no "<n>g"`},
		{"NVIDIA A100", "xg.5gb", 0, "no \"<n>g\""},
	} {
		got, err := MIGComputeShare(tc.model, tc.profile)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("MIGComputeShare(%q, %q) error = %v, want one containing %q", tc.model, tc.profile, err, tc.err)
			}
			continue
		}
		if err != nil || math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("MIGComputeShare(%q, %q) = %v, %v; want %v", tc.model, tc.profile, got, err, tc.want)
		}
	}
}

// FuzzMIGComputeShare holds what the idle split relies on for any profile a
// page can carry: a share in (0, 1], or an error.
func FuzzMIGComputeShare(f *testing.F) {
	for _, p := range []string{"", "1g.5gb", "3g.40gb", "1c.2g.35gb", "1g.10gb+me", "7g.80gb", "0g.1gb", "99999999999999999999g.1gb", "g.", "-1g.5gb"} {
		f.Add("NVIDIA A100-SXM4-80GB", p)
		f.Add("NVIDIA A30", p)
	}
	f.Fuzz(func(t *testing.T, model, profile string) {
		share, err := MIGComputeShare(model, profile)
		if err != nil {
			if share != 0 {
				t.Fatalf("MIGComputeShare(%q, %q) = %v with error %v", model, profile, share, err)
			}
			return
		}
		if !(share > 0 && share <= 1) {
			t.Fatalf("MIGComputeShare(%q, %q) = %v, outside (0, 1]", model, profile, share)
		}
	})
}
