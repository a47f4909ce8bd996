package trace

import (
	"strings"
	"testing"
)

func TestJobMIGValidate(t *testing.T) {
	base := Job{Name: "j", Members: 1, Outcome: Succeeded}
	for _, tc := range []struct {
		mig map[string]int
		err string
	}{
		{nil, ""},
		{map[string]int{"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 0}, ""},
		{map[string]int{"nvidia.com/gpu": 1}, "not a nvidia.com/mig-<profile> resource"},
		{map[string]int{"nvidia.com/mig-big": 1}, "no \"<n>g\""},
		{map[string]int{"nvidia.com/mig-1g.10gb": -1}, "negative"},
	} {
		j := base
		j.MIG = tc.mig
		err := j.Validate()
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("Validate with mig %v = %v, want %q", tc.mig, err, tc.err)
		}
	}
	if got := MIGProfiles(map[string]int{"nvidia.com/mig-1g.10gb": 2, "nvidia.com/gpu": 1}); len(got) != 1 || got["1g.10gb"] != 2 {
		t.Errorf("MIGProfiles = %v, want 1g.10gb: 2", got)
	}
}
