package schedplugins_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/reasons"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
)

const parityProfile = `apiVersion: schedloop.io/v1
kind: SchedulingProfile
name: parity
weights: {bestfit: 1}
queues:
  shared: {maxGPUs: 1}
  open: {maxGPUs: 0}
`

// sharePod asks for milli thousandths of one GPU in queue.
func (e *env) sharePod(name string, milli int64, queue string) {
	e.t.Helper()
	share := corev1.ResourceList{podspec.ResourceGPUMilli: *resource.NewQuantity(milli, resource.DecimalSI)}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{podspec.LabelQueue: queue}},
		Spec: corev1.PodSpec{SchedulerName: ours, Containers: []corev1.Container{{Name: "main", Image: "infer:1",
			Resources: corev1.ResourceRequirements{Requests: share, Limits: share}}}},
	}
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(e.t.Context(), p, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// The queue plugin and per-device GPU shares behave live as the simulator
// replays them: a 1-GPU queue admits four quarter-GPU pods (not one), a
// queue with maxGPUs 0 is unlimited (not closed), the quarters share one
// device and the whole-GPU pods get the other three.
func TestQueueLimitsAndSharesAsReplayed(t *testing.T) {
	nodes := []trace.Node{{Name: "a", GPUs: 4, GPUModel: "H100", CPUMilli: 128000, MemoryMiB: 1 << 20}}
	e := newEnv(t, nodes, parityProfile)
	for i := range 6 {
		e.sharePod(fmt.Sprintf("quarter-%d", i), 250, "shared")
	}
	for i := range 3 {
		e.pod(fmt.Sprintf("whole-%d", i), ours, 1, inQueue("open"))
	}
	e.waitBound("whole-", 3)
	quarters := e.waitBound("quarter-", 4)
	for i := range 6 {
		if name := fmt.Sprintf("quarter-%d", i); quarters[name] == "" {
			e.waitReason(name, reasons.QueueAtLimit("shared", 1))
		}
	}
	if b, pending := e.placement("quarter-"); len(b) != 4 || pending != 2 {
		t.Errorf("quarter GPUs: %d bound, %d pending; want 4 and 2", len(b), pending)
	}

	// Each device holds at most one GPU: the record the scheduler wrote
	// on every pod adds up per device.
	pods, err := e.c.Client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]int{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			continue
		}
		devices, ok := podspec.Devices(&p)
		r := podspec.Request(&p)
		if !ok || len(devices) != r.GPUs {
			t.Fatalf("%s: devices %q recorded for %+v", p.Name, p.Annotations[podspec.AnnotationGPUDevices], r)
		}
		for _, d := range devices {
			used[d] += int(r.TotalGPUMilli()) / r.GPUs
		}
	}
	for d, milli := range used {
		if milli > scoring.MilliPerGPU {
			t.Errorf("device %d holds %d milli-GPU", d, milli)
		}
	}
	if len(used) != 4 || len(quarters) != 4 {
		t.Errorf("devices in use %v; want the four quarters on one device and three whole GPUs", used)
	}

	// The same jobs replayed under the same profile start the same pods.
	doc, err := profile.Parse([]byte(parityProfile))
	if err != nil {
		t.Fatal(err)
	}
	var jobs []sim.Job
	for i := range 6 {
		jobs = append(jobs, sim.Job{Name: fmt.Sprintf("quarter-%d", i), Duration: time.Hour, Members: 1, Queue: "shared",
			Request: scoring.Request{CPUMilli: 0, GPUs: 1, GPUMilli: 250}})
	}
	for i := range 3 {
		jobs = append(jobs, sim.Job{Name: fmt.Sprintf("whole-%d", i), Duration: time.Hour, Members: 1, Queue: "open",
			Request: scoring.Request{CPUMilli: 1000, GPUs: 1}})
	}
	res, err := sim.Run(sim.NewCluster(trace.Inventory{Nodes: nodes}), jobs, sim.Config{Params: doc.Params()})
	if err != nil {
		t.Fatal(err)
	}
	// Which quarters go first follows arrival, which the two sides stamp
	// differently for pods created together; how many start may not differ.
	live, _ := e.placement("")
	startedLive, startedReplay := map[string]int{}, map[string]int{}
	for i, o := range res.Jobs {
		if o.Start == 0 {
			startedReplay[jobs[i].Queue]++
		}
		if live[jobs[i].Name] != "" {
			startedLive[jobs[i].Queue]++
		}
	}
	if fmt.Sprint(startedLive) != fmt.Sprint(startedReplay) || startedLive["shared"] != 4 || startedLive["open"] != 3 {
		t.Errorf("pods started per queue: live %v, replayed %v; want shared:4 open:3 on both", startedLive, startedReplay)
	}
}
