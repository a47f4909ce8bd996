// Package bench measures scheduling throughput of schedloop's profile
// against the stock default profile on the in-process apiserver, in the
// style of kube-scheduler's scheduler_perf: the same nodes and the same
// workload (gangs and single pods), the same run, one after the other.
package bench_test

import (
	"context"
	"flag"
	"fmt"
	"os"
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

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/schedplugins"
)

var (
	nodes    = flag.Int("sched.nodes", 1000, "simulated 8-GPU nodes")
	pods     = flag.Int("sched.pods", 10000, "pods per profile; half in gangs of -sched.gang one-GPU members, half single CPU pods")
	gangSize = flag.Int("sched.gang", 8, "members per gang")
)

func config(tb testing.TB, kubeconfig string) string {
	shipped, err := os.ReadFile("../../../deploy/scheduler-config.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return string(shipped) + fmt.Sprintf(`- schedulerName: default-scheduler
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: %s
  qps: 5000
  burst: 5000
`, kubeconfig)
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

		run := func(scheduler string) float64 {
			createWorkload(b, c, scheduler)
			s, err := c.StartScheduler(ctx, harness.SchedulerOptions{Config: config(b, c.Kubeconfig), Plugins: schedplugins.Options()})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Minute, true, func(context.Context) (bool, error) {
				return bound.Load() >= int64(*pods), nil
			})
			elapsed := time.Since(start)
			s.Stop()
			if err != nil {
				b.Fatalf("%s: %d of %d pods bound: %v", scheduler, bound.Load(), *pods, err)
			}
			rate := float64(*pods) / elapsed.Seconds()
			b.Logf("%s: %d pods on %d nodes in %v: %.0f pods/s", scheduler, *pods, *nodes, elapsed.Round(time.Millisecond), rate)
			if err := c.Client.CoreV1().Pods("default").DeleteCollection(ctx, *metav1.NewDeleteOptions(0), metav1.ListOptions{}); err != nil {
				b.Fatal(err)
			}
			if err := c.Dynamic.Resource(podgroup.GVR).Namespace("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				b.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
				return bound.Load() == 0, nil
			}); err != nil {
				b.Fatal("pods not deleted")
			}
			return rate
		}
		stock := run("default-scheduler")
		ours := run("schedloop")
		b.ReportMetric(ours, "scheduler_pods_per_s@pods/s")
		b.ReportMetric(stock, "scheduler_default_pods_per_s@pods/s")
		b.ReportMetric(ours/stock, "scheduler_vs_default_ratio@ratio")
		c.Stop()
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
