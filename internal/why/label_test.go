package why

import (
	"testing"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/reasons"
)

func TestLabelPodWideReasons(t *testing.T) {
	for _, tt := range []struct {
		category string
		rs       map[string]int
		nodes    int
		want     string
	}{
		{string(schedloop.WaitQuota), map[string]int{"insufficient quota for nvidia.com/gpu in flavor h100": 0}, 0,
			"waiting for quota: insufficient quota for nvidia.com/gpu in flavor h100"},
		{string(schedloop.WaitVolume), map[string]int{"pod has unbound immediate PersistentVolumeClaims": 0}, 0,
			"volumes: pod has unbound immediate PersistentVolumeClaims"},
		{string(schedloop.WaitTaintAffinity), map[string]int{"node(s) had untolerated taint(s)": 5}, 5,
			"taints/affinity: 5 node(s) had untolerated taint(s) (of 5 nodes)"},
		{string(schedloop.WaitInsufficientGPU), map[string]int{reasons.GangNoRoom("ml", "solo", reasons.ShortGPUs, 0, 1): 4}, 4,
			"insufficient GPU: free capacity fits 0/1 members of gang ml/solo"},
		{string(schedloop.WaitInsufficientCPU), map[string]int{reasons.GangNoRoom("ml", "big", reasons.ShortCPUMemory, 2, 3): 4}, 4,
			"insufficient CPU/memory: free capacity fits 2/3 members of gang ml/big"},
		{string(schedloop.WaitReserved), map[string]int{"reserved for ml/big": 5, "Insufficient nvidia.com/gpu": 3}, 8,
			"reserved for a job ahead: 5 node(s) held for ml/big"},
	} {
		if got := Label(tt.category, tt.rs, tt.nodes, ""); got != tt.want {
			t.Errorf("Label(%s, %v) = %q, want %q", tt.category, tt.rs, got, tt.want)
		}
	}
}
