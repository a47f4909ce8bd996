package schedplugins_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/trace"
)

// teamA1Profile limits queue team-a to one GPU.
const teamA1Profile = `apiVersion: schedloop.io/v1
kind: SchedulingProfile
name: queues-mig
weights: {binpack: 1}
queues:
  team-a: {maxGPUs: 1}
`

// migInstances makes a pod ask for n MIG instances of profile instead of
// whole GPUs.
func migInstances(profile string, n int64) podOpt {
	return func(p *corev1.Pod) {
		l := p.Spec.Containers[0].Resources.Limits
		delete(l, harness.ResourceGPU)
		l[corev1.ResourceName(podspec.ResourceMIGPrefix+profile)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
}

// Two 1g instances count 2 × 142 milli-GPU toward a queue (a pod allowing
// any model is read as asking of a seven-slice GPU): a one-GPU limit
// admits three such pods and holds the fourth, though the node has
// instances to spare.
func TestQueueLimitCountsMIGInstances(t *testing.T) {
	nodes := []trace.Node{{Name: "m00", GPUs: 1, GPUModel: "NVIDIA-H100-80GB-HBM3", CPUMilli: 128000, MemoryMiB: 1 << 20,
		MIG: map[string]int{podspec.ResourceMIGPrefix + "1g.10gb": 14}}}
	e := newEnv(t, nodes, teamA1Profile)
	for i := range 4 {
		e.pod("a-"+string(rune('0'+i)), ours, 0, inQueue("team-a"), migInstances("1g.10gb", 2))
	}
	e.waitBound("a-", 3)
	bound, _ := e.placement("a-")
	var waiting string
	for i := range 4 {
		if name := "a-" + string(rune('0'+i)); bound[name] == "" {
			waiting = name
			break
		}
	}
	e.waitReason(waiting, "queue team-a at limit 1 GPUs")
	if bound, pending := e.placement("a-"); len(bound) != 3 || pending != 1 {
		t.Fatalf("queue team-a: %d bound, %d pending; want 3 (6 instances, 852 milli-GPU) and 1", len(bound), pending)
	}
}
