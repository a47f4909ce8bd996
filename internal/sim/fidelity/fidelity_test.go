// Package fidelity_test checks that the simulator places pods where the
// real scheduler does: the same small trace goes through sim.Run and
// through kube-scheduler with schedloop's plugins on the in-process
// apiserver, and the placements are compared pod by pod.
package fidelity_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/schedplugins"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
)

// The profile under test. Fragmentation is left out: the live plugin
// measures it against the pods it has seen so far, the replay against the
// whole trace, so the two would differ by design, not by error.
const profileYAML = `apiVersion: schedloop.io/v1
kind: SchedulingProfile
name: fidelity
weights: {topology: 10, bestfit: 2, packing: 1}
`

// Nodes of 8, 4 and 2 GPUs; pods asking for 1 to 8 GPUs that fill them
// exactly, so a single different choice strands the 8-GPU pod.
var (
	nodeGPUs = []int{8, 8, 4, 4, 2, 2}
	podGPUs  = []int{1, 2, 1, 4, 1, 1, 2, 8, 1, 2, 1, 1, 2, 1}
)

func TestSimulatorAgreesWithScheduler(t *testing.T) {
	var nodes []trace.Node
	for i, g := range nodeGPUs {
		nodes = append(nodes, trace.Node{Name: fmt.Sprintf("f%02d", i), GPUs: g, GPUModel: "H100", CPUMilli: 64000, MemoryMiB: 1 << 20})
	}
	// The replay: pods arrive a second apart and never finish.
	var jobs []sim.Job
	for i, g := range podGPUs {
		jobs = append(jobs, sim.Job{Name: fmt.Sprintf("p%02d", i), Arrival: time.Duration(i) * time.Second,
			Duration: 1000 * time.Hour, Members: 1, Request: scoring.Request{CPUMilli: 1000, GPUs: g}, Util: 1})
	}
	doc, err := profile.Parse([]byte(profileYAML))
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(sim.NewCluster(trace.Inventory{Levels: trace.DefaultLevels, Nodes: nodes}), jobs,
		sim.Config{Params: doc.Params(), RecordPlacements: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i, o := range res.Jobs {
		if o.State == sim.Done {
			want[jobs[i].Name] = o.Nodes[0]
		}
	}

	// The same pods, one at a time, through the real scheduler.
	c := clusterWithProfile(t, profileYAML)
	ctx := t.Context()
	if _, err := c.AddNodes(ctx, nodes, harness.NodeOptions{NoExporters: true, Heartbeat: time.Minute}); err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile("../../../deploy/scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(shipped) + fmt.Sprintf("leaderElection:\n  leaderElect: false\nclientConnection:\n  kubeconfig: %s\n  qps: 5000\n  burst: 5000\n", c.Kubeconfig)
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{Config: cfg, Plugins: schedplugins.Options()}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, j := range jobs {
		got[j.Name] = bind(ctx, t, c, j)
	}

	agree, diffs := 0, []string{}
	for _, j := range jobs {
		if got[j.Name] == want[j.Name] {
			agree++
		} else {
			diffs = append(diffs, fmt.Sprintf("%s (%d GPUs): simulator %q, scheduler %q", j.Name, j.Request.GPUs, want[j.Name], got[j.Name]))
		}
	}
	ratio := float64(agree) / float64(len(jobs))
	t.Logf("placement agreement %d/%d (%.0f%%)", agree, len(jobs), 100*ratio)
	for _, d := range diffs {
		t.Log("differs: " + d)
	}
	if ratio < 0.95 {
		t.Errorf("agreement %.0f%% is below 95%%", 100*ratio)
	}
}

// bind creates the pod and returns the node it was bound to ("" when the
// scheduler reports it unschedulable).
func bind(ctx context.Context, t *testing.T, c *harness.Cluster, j sim.Job) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: "default"},
		Spec: corev1.PodSpec{SchedulerName: "schedloop", Containers: []corev1.Container{{Name: "main", Image: "train:1",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(j.Request.CPUMilli, resource.DecimalSI)},
				Limits:   corev1.ResourceList{harness.ResourceGPU: *resource.NewQuantity(int64(j.Request.GPUs), resource.DecimalSI)},
			}}}},
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := ""
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, j.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			node = p.Spec.NodeName
			return true, nil
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s: %v", j.Name, err)
	}
	return node
}
