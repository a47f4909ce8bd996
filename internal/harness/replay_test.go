package harness_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/player"
	"github.com/schedloop/schedloop/internal/trace"
)

// testInventory is 100 eight-GPU nodes in one spine, 2 racks, 4 NVLink
// domains per rack.
func testInventory(t testing.TB, n int) trace.Inventory {
	t.Helper()
	nodes := make([]trace.Node, n)
	for i := range nodes {
		nodes[i] = trace.Node{Name: fmt.Sprintf("gpu-%03d", i), GPUs: 8, GPUModel: "NVIDIA-H100-80GB-HBM3",
			GPUMemoryMiB: 81559, CPUMilli: 192000, MemoryMiB: 2 << 20}
	}
	if err := trace.AssignTopology(nodes, "dc", trace.DefaultLevels, []int{1, 2, 4}); err != nil {
		t.Fatal(err)
	}
	return trace.Inventory{Levels: trace.DefaultLevels, Nodes: nodes}
}

// gpuSample is one GPU's reading in one scrape.
type gpuSample struct {
	node, gpu, pod string
	util, fb       float64
}

// scrape reads one exporter endpoint the way Prometheus would.
func scrape(url string) ([]gpuSample, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); expfmt.ResponseFormat(resp.Header).FormatType() != expfmt.TypeTextPlain {
		return nil, fmt.Errorf("content type %q is not the text exposition format", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse exposition: %w", err)
	}
	byGPU := map[string]*gpuSample{}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	for _, name := range []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"} {
		mf := families[name]
		if mf == nil {
			return nil, fmt.Errorf("%s missing", name)
		}
		for _, m := range mf.GetMetric() {
			g := label(m, "gpu")
			s := byGPU[g]
			if s == nil {
				s = &gpuSample{node: label(m, "Hostname"), gpu: g, pod: label(m, "pod")}
				byGPU[g] = s
			}
			if name == "DCGM_FI_DEV_GPU_UTIL" {
				s.util = m.GetGauge().GetValue()
			} else {
				s.fb = m.GetGauge().GetValue()
			}
		}
	}
	for _, name := range []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"} {
		if families[name] == nil {
			return nil, fmt.Errorf("%s missing", name)
		}
	}
	out := make([]gpuSample, 0, len(byGPU))
	for _, s := range byGPU {
		out = append(out, *s)
	}
	return out, nil
}

// TestReplayTraceWithStockScheduler is the harness end to end: 100 simulated
// 8-GPU nodes in 2 racks x 4 NVLink domains, a 200-job trace played through
// the stock kube-scheduler, every job must run and end as the trace says,
// and the exporters must show utilization only on GPUs that pods held.
func TestReplayTraceWithStockScheduler(t *testing.T) {
	c := harness.NewForTest(t, harness.Options{})
	ctx := t.Context()
	clock, err := harness.NewClock(300)
	if err != nil {
		t.Fatal(err)
	}
	inv := testInventory(t, 100)
	nodes, err := c.AddNodes(ctx, inv.Nodes, harness.NodeOptions{Clock: clock, Workers: 8})
	if err != nil {
		t.Fatal(err)
	}
	racks, domains := map[string]bool{}, map[string]bool{}
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list.Items {
		racks[n.Labels[trace.LabelRack]] = true
		domains[n.Labels[trace.LabelNVLinkDomain]] = true
	}
	if len(list.Items) != 100 || len(racks) != 2 || len(domains) != 8 {
		t.Fatalf("%d nodes in %d racks, %d NVLink domains; want 100, 2, 8", len(list.Items), len(racks), len(domains))
	}
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{}); err != nil {
		t.Fatal(err)
	}

	jobs := trace.Generate(trace.GenConfig{
		Seed: 3, Jobs: 200, MeanInterarrival: 10 * time.Second,
		MinDuration: 2 * time.Minute, MaxDuration: 20 * time.Minute,
		GangSizes: []int{1, 1, 2, 4}, GPUsPerMember: []int{1, 2, 4, 8},
		Queues:    []string{"research", "prod"},
		IdleShare: 0.1, FailShare: 0.05,
	})
	p, err := player.New(c.Client, c.Dynamic, jobs, player.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}

	// Scrape every exporter while the trace plays.
	var (
		mu        sync.Mutex
		samples   []gpuSample
		scrapeErr error
	)
	scrapeCtx, stopScrape := context.WithCancel(ctx)
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		tick := time.NewTicker(400 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, name := range nodes.Names() {
				got, err := scrape(nodes.ExporterURL(name))
				mu.Lock()
				if err != nil && scrapeErr == nil && scrapeCtx.Err() == nil {
					scrapeErr = fmt.Errorf("scrape %s: %w", name, err)
				}
				samples = append(samples, got...)
				mu.Unlock()
			}
			select {
			case <-scrapeCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	// The bound catches a replay that stops moving. The trace plays in
	// about 11 s of wall time at this speed; the rest is the scheduler's,
	// the runner's and the scrapes' CPU, which on a shared 2-core machine
	// under a load of 30 was short of 60 s: jobs submitted late had their
	// pods still unbound, or bound and not yet started, at the bound.
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	began := time.Now()
	rep, err := p.Run(runCtx)
	stopScrape()
	<-scraped
	if err != nil {
		describePods(t, c)
		for _, r := range rep.Jobs {
			if !r.Done() {
				t.Logf("job %s not done: members %d submitted %v started %v nodes %v ok %d failed %d", r.Name, r.Job.Members, !r.Submitted.IsZero(), !r.FirstStart.IsZero(), r.Nodes, r.Succeeded, r.Failed)
			}
		}
		t.Fatalf("replay: %v", err)
	}
	t.Logf("200 jobs replayed in %v wall (%.1f jobs/s), %d pods started, %d finished",
		time.Since(began).Round(time.Millisecond), rep.JobsPerSecond(), nodes.PodsStarted(), nodes.PodsFinished())

	var lastSubmit time.Time
	var maxWait, sumWait time.Duration
	for _, r := range rep.Jobs {
		if r.Submitted.After(lastSubmit) {
			lastSubmit = r.Submitted
		}
		w := r.LastStart.Sub(r.Submitted)
		sumWait += w
		maxWait = max(maxWait, w)
	}
	t.Logf("last submission at +%v, last end at +%v; wait to start: mean %v, max %v",
		lastSubmit.Sub(rep.Began).Round(time.Millisecond), rep.Ended.Sub(rep.Began).Round(time.Millisecond),
		(sumWait / time.Duration(len(rep.Jobs))).Round(time.Millisecond), maxWait.Round(time.Millisecond))

	if evs, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{}); err == nil {
		reasons := map[string]int{}
		for _, e := range evs.Items {
			reasons[e.Reason] += int(max(e.Count, 1))
			if e.Reason == "FailedScheduling" && reasons[e.Reason] < 3 {
				t.Logf("event %s: %s", e.InvolvedObject.Name, e.Message)
			}
		}
		t.Logf("events: %v", reasons)
	}

	// Every job ran all its members and ended the way the trace says.
	podNode := map[string]string{} // pod name -> node it ran on
	util := map[string]float64{}   // pod name -> expected GPU_UTIL
	for _, r := range rep.Jobs {
		j := r.Job
		if !r.Done() || len(r.Nodes) != j.Members || r.FirstStart.IsZero() {
			t.Errorf("job %s: ran %d of %d members, %d succeeded, %d failed", j.Name, len(r.Nodes), j.Members, r.Succeeded, r.Failed)
			continue
		}
		wantOK, wantFail := j.Members, 0
		if j.Outcome == trace.Failed {
			wantOK, wantFail = 0, j.Members
		}
		if r.Succeeded != wantOK || r.Failed != wantFail || r.Deleted != 0 {
			t.Errorf("job %s: %d succeeded, %d failed, %d deleted; trace says %s", j.Name, r.Succeeded, r.Failed, r.Deleted, j.Outcome)
		}
		for m := range j.Members {
			util[fmt.Sprintf("%s-%d", r.Name, m)] = float64(int64(100*j.Util + 0.5))
		}
	}
	pods, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: harness.LabelJob})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		podNode[pod.Name] = pod.Spec.NodeName
	}

	// The exporters reported utilization only for GPUs held by pods, with the
	// pod's own profile, and only on the node the pod ran on.
	mu.Lock()
	defer mu.Unlock()
	if scrapeErr != nil {
		t.Fatal(scrapeErr)
	}
	busy, idleHeld := 0, 0
	busyNodes := map[string]bool{}
	for _, s := range samples {
		switch {
		case s.pod == "" && (s.util != 0 || s.fb != 0):
			t.Fatalf("%s GPU %s reports util %v, fb %v with no pod", s.node, s.gpu, s.util, s.fb)
		case s.pod == "":
			continue
		case podNode[s.pod] != s.node:
			t.Fatalf("%s GPU %s attributed to pod %s, which ran on %q", s.node, s.gpu, s.pod, podNode[s.pod])
		case s.util != util[s.pod]:
			t.Fatalf("%s GPU %s: pod %s util %v, its profile says %v", s.node, s.gpu, s.pod, s.util, util[s.pod])
		case s.util == 0:
			idleHeld++
			if s.fb == 0 {
				t.Errorf("%s GPU %s: idle pod %s holds no memory", s.node, s.gpu, s.pod)
			}
		default:
			busy++
			busyNodes[s.node] = true
		}
	}
	if busy == 0 || idleHeld == 0 {
		t.Fatalf("scrapes saw %d busy and %d idle-but-held GPU samples; want both", busy, idleHeld)
	}
	for node := range busyNodes {
		ran := false
		for _, n := range podNode {
			ran = ran || n == node
		}
		if !ran {
			t.Errorf("node %s reported utilization but no pod ran there", node)
		}
	}
	t.Logf("%d GPU samples: %d busy, %d held idle, on %d nodes", len(samples), busy, idleHeld, len(busyNodes))
}

// describePods logs where the trace's pods stand, to explain a stuck replay.
func describePods(t *testing.T, c *harness.Cluster) {
	pods, err := c.Client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("list pods: %v", err)
		return
	}
	phases := map[string]int{}
	shown := 0
	for _, p := range pods.Items {
		key := string(p.Status.Phase)
		if p.Spec.NodeName == "" {
			key += " (unbound)"
		}
		phases[key]++
		if p.Status.Phase != "Succeeded" && p.Status.Phase != "Failed" && shown < 5 {
			shown++
			t.Logf("pod %s node %q phase %s conditions %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
		}
	}
	t.Logf("pods by phase: %v", phases)
}
