// Package bench measures scheduling throughput of schedloop's profile
// against the stock default profile on the in-process apiserver, in the
// style of kube-scheduler's scheduler_perf: the same nodes and the same
// workload (gangs and single pods), the same run, one after the other.
//
// Both profiles face the same definition: pods/s is every pod of the
// workload bound (spec.nodeName set, as the pod informer sees it) divided by
// the time from the scheduler's start to the last binding. Gang members of
// schedloop's profile legitimately wait at Permit for their gang; that wait
// is inside the measured time. The stock profile does not know gangs and
// binds their members one by one. One scheduler configuration carries both
// profiles; they share schedloop's QueueSort plugin (kube-scheduler allows
// one for all profiles), which orders pods outside gangs as PrioritySort.
//
// Each run also logs the scheduler's own metrics (extension point and
// Permit wait durations, attempts, apiserver requests) and its
// FailedScheduling events, and reports the whole process's CPU per pod,
// which other load on the machine disturbs less than pods/s.
package bench_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/schedloop/schedloop/internal/cputime"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/schedplugins"
	"github.com/schedloop/schedloop/internal/schedplugins/schedtest"
)

var (
	nodes    = flag.Int("sched.nodes", 1000, "simulated 8-GPU nodes")
	pods     = flag.Int("sched.pods", 10000, "pods per profile; half in gangs of -sched.gang one-GPU members, half single CPU pods")
	gangSize = flag.Int("sched.gang", 8, "members per gang")
	rows     = flag.Int("sched.breakdown", 12, "lines of the scheduler's own duration metrics to log per profile (0: none)")
	only     = flag.String("sched.only", "", "run only this profile (default-scheduler or schedloop), for profiling one side")
	percent  = flag.Int("sched.percentage", 0, "set schedloop's percentageOfNodesToScore (0: as shipped, the adaptive default; 100 measures what scoring every node costs)")
	profDir  = flag.String("sched.cpuprofile", "", "directory to write a CPU profile of each profile's run to (<scheduler>.prof)")
)

func config(tb testing.TB, kubeconfig string) string {
	raw, err := os.ReadFile("../../../deploy/scheduler-config.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	shipped := string(raw)
	if *percent != 0 {
		const profile = "- schedulerName: schedloop\n"
		if !strings.Contains(shipped, profile) || strings.Contains(shipped, "\n  percentageOfNodesToScore:") {
			tb.Fatalf("-sched.percentage: the shipped config no longer has %q without a percentageOfNodesToScore", profile)
		}
		shipped = strings.Replace(shipped, profile, profile+fmt.Sprintf("  percentageOfNodesToScore: %d\n", *percent), 1)
	}
	return schedtest.WithStockProfile(shipped, kubeconfig)
}

func BenchmarkSchedulerThroughput(b *testing.B) {
	for b.Loop() {
		c := harness.NewForTest(b, harness.Options{})
		ctx := b.Context()
		createNodes(b, c, *nodes)
		var bound atomic.Int64
		f := informers.NewSharedInformerFactory(c.Client, 0)
		inf := f.Core().V1().Pods().Informer()
		count := func(obj any, d int64) {
			if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
				bound.Add(d)
			}
		}
		inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { count(o, 1) },
			UpdateFunc: func(o, n any) {
				if o.(*corev1.Pod).Spec.NodeName == "" && n.(*corev1.Pod).Spec.NodeName != "" {
					bound.Add(1)
				}
			},
			DeleteFunc: func(o any) {
				if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = t.Obj
				}
				count(o, -1)
			},
		})
		f.Start(ctx.Done())
		f.WaitForCacheSync(ctx.Done())

		type result struct {
			rate float64
			cpu  time.Duration
		}
		run := func(scheduler string) result {
			createWorkload(b, c, scheduler)
			before := snapshot(b)
			s, err := c.StartScheduler(ctx, harness.SchedulerOptions{Config: config(b, c.Kubeconfig), Plugins: schedplugins.Options()})
			if err != nil {
				b.Fatal(err)
			}
			stopProfile := startProfile(b, scheduler)
			cpu0 := cputime.Process(b)
			start := time.Now()
			err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Minute, true, func(context.Context) (bool, error) {
				return bound.Load() >= int64(*pods), nil
			})
			elapsed := time.Since(start)
			cpu := cputime.Process(b) - cpu0
			stopProfile()
			s.Stop()
			if err != nil {
				b.Fatalf("%s: %d of %d pods bound: %v", scheduler, bound.Load(), *pods, err)
			}
			rate := float64(*pods) / elapsed.Seconds()
			b.Logf("%s: %d pods on %d nodes in %v: %.0f pods/s, process CPU %v (%.2f ms per pod)", scheduler, *pods, *nodes,
				elapsed.Round(time.Millisecond), rate, cpu.Round(time.Millisecond), float64(cpu.Microseconds())/1000/float64(*pods))
			if *rows > 0 {
				b.Logf("%s: where the time went (seconds, samples, series):\n%s", scheduler, breakdown(before, snapshot(b), *rows))
				b.Logf("%s: FailedScheduling events by message:\n%s", scheduler, failures(b, c, *rows))
			}
			// One DeleteCollection of many thousand pods can outlast the
			// apiserver's request timeout; each try deletes a share.
			err = wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(context.Context) (bool, error) {
				err := c.Client.CoreV1().Pods("default").DeleteCollection(ctx, *metav1.NewDeleteOptions(0), metav1.ListOptions{})
				if err != nil {
					b.Logf("delete pods (retrying): %v", err)
				}
				return err == nil, nil
			})
			if err != nil {
				b.Fatal(err)
			}
			if err := c.Dynamic.Resource(podgroup.GVR).Namespace("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				b.Fatal(err)
			}
			if err := c.Client.EventsV1().Events("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				b.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
				return bound.Load() == 0, nil
			}); err != nil {
				b.Fatal("pods not deleted")
			}
			return result{rate, cpu}
		}
		var stockRun, oursRun result
		if *only != "schedloop" {
			stockRun = run("default-scheduler")
		}
		if *only != "default-scheduler" {
			oursRun = run("schedloop")
		}
		stock, ours := stockRun.rate, oursRun.rate
		b.ReportMetric(ours, "scheduler_pods_per_s@pods/s")
		b.ReportMetric(stock, "scheduler_default_pods_per_s@pods/s")
		b.ReportMetric(ours/stock, "scheduler_vs_default_ratio@ratio")
		// CPU of the whole process (apiserver, etcd and scheduler) per pod:
		// less sensitive than pods/s to other load on the machine.
		b.ReportMetric(float64(oursRun.cpu.Microseconds())/1000/float64(*pods), "scheduler_cpu_ms_per_pod@ms")
		b.ReportMetric(float64(stockRun.cpu.Microseconds())/1000/float64(*pods), "scheduler_default_cpu_ms_per_pod@ms")
		c.Stop()
	}
}

// startProfile writes a CPU profile of one run when -sched.cpuprofile is set.
func startProfile(tb testing.TB, scheduler string) (stop func()) {
	if *profDir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(*profDir, scheduler+".prof"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		tb.Fatalf("cpu profile (is -test.cpuprofile set too?): %v", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			tb.Fatal(err)
		}
	}
}

func createNodes(tb testing.TB, c *harness.Cluster, n int) {
	g, ctx := errgroup.WithContext(tb.Context())
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			name := fmt.Sprintf("node-%04d", i)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				"kubernetes.io/hostname":              name,
				"nvidia.com/gpu.product":              "H100",
				"topology.schedloop.io/spine":         fmt.Sprintf("s%d", i/256),
				"topology.schedloop.io/rack":          fmt.Sprintf("r%d", i/32),
				"topology.schedloop.io/nvlink-domain": fmt.Sprintf("nv%d", i/8),
			}}}
			created, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			res := corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("128"), corev1.ResourceMemory: resource.MustParse("1Ti"),
				corev1.ResourcePods: resource.MustParse("256"), harness.ResourceGPU: resource.MustParse("8"),
			}
			created.Status = corev1.NodeStatus{Capacity: res, Allocatable: res, Phase: corev1.NodeRunning,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
			_, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
}

// createWorkload creates the pods (and PodGroups) before the scheduler
// starts, so both profiles face the same full queue.
func createWorkload(tb testing.TB, c *harness.Cluster, scheduler string) {
	g, ctx := errgroup.WithContext(tb.Context())
	g.SetLimit(32)
	gangPods := *pods / 2 / *gangSize * *gangSize
	for gi := 0; gi < gangPods / *gangSize; gi++ {
		pg := podgroup.New("default", fmt.Sprintf("g%04d", gi), int32(*gangSize))
		if _, err := podgroup.Create(ctx, c.Dynamic, pg); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range *pods {
		g.Go(func() error {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%05d", i), Namespace: "default", Labels: map[string]string{}},
				Spec: corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "main", Image: "train:1",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
			}
			if i < gangPods {
				p.Labels[podgroup.LabelPodGroup] = fmt.Sprintf("g%04d", i / *gangSize)
				p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{harness.ResourceGPU: resource.MustParse("1")}
			}
			_, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
}
