package harness

import (
	"strings"
	"testing"

	"github.com/schedloop/schedloop/internal/trace"
)

// Instances pack first fit, largest first, onto as few GPUs as hold them,
// numbered from 1 on each; a resource that names no MIG profile is refused.
func TestPartitionMIGPacksInstances(t *testing.T) {
	spec := trace.Node{Name: "n", GPUs: 2, GPUModel: "NVIDIA-A100-SXM4-80GB",
		MIG: map[string]int{"nvidia.com/mig-1g.10gb": 3, "nvidia.com/mig-3g.40gb": 2}}
	got, parts, err := partitionMIG(spec)
	if err != nil {
		t.Fatal(err)
	}
	var layout []string
	for _, in := range got {
		layout = append(layout, in.profile+"@"+string(rune('0'+in.part))+"/"+in.id)
	}
	want := "3g.40gb@0/1 3g.40gb@0/2 1g.10gb@0/3 1g.10gb@1/1 1g.10gb@1/2"
	if strings.Join(layout, " ") != want || len(parts) != 2 || parts[0] == parts[1] {
		t.Errorf("layout %v on GPUs %v, want %s on two", layout, parts, want)
	}
	for _, bad := range []map[string]int{{"nvidia.com/gpu": 1}, {"nvidia.com/mig-9g.90gb": 1}} {
		if _, _, err := partitionMIG(trace.Node{Name: "n", GPUModel: "NVIDIA-A100-SXM4-80GB", MIG: bad}); err == nil || !strings.Contains(err.Error(), "field mig") {
			t.Errorf("partitionMIG(%v) error = %v, want one naming the field", bad, err)
		}
	}
}
