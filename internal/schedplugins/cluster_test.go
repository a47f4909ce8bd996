package schedplugins_test

import (
	"context"
	"fmt"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/schedplugins"
	"github.com/schedloop/schedloop/internal/schedplugins/schedtest"
	"github.com/schedloop/schedloop/internal/trace"
)

const (
	ours  = "schedloop"
	stock = "default-scheduler"
	ns    = "default"
)

// env is a harness cluster with GPU nodes and kube-scheduler running the
// shipped configuration (deploy/scheduler-config.yaml) next to the stock
// default profile.
type env struct {
	t *testing.T
	c *harness.Cluster
}

// schedulerConfig is the shipped configuration with the stock profile
// added and the test cluster's connection settings.
func schedulerConfig(t testing.TB, kubeconfig string) string {
	t.Helper()
	shipped, err := os.ReadFile("../../deploy/scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return schedtest.WithStockProfile(string(shipped), kubeconfig)
}

func newEnv(t *testing.T, nodes []trace.Node, profileYAML string) *env {
	t.Helper()
	return newEnvWith(t, nodes, profileYAML, schedplugins.NewSet())
}

// newEnvWith runs set's plugins, so a test can read the profile they hold.
func newEnvWith(t *testing.T, nodes []trace.Node, profileYAML string, set *schedplugins.Set) *env {
	t.Helper()
	return newEnvConfigured(t, nodes, profileYAML, set, func(config string) string { return config })
}

// newEnvConfigured is newEnvWith with the scheduler configuration passed
// through edit first.
func newEnvConfigured(t *testing.T, nodes []trace.Node, profileYAML string, set *schedplugins.Set, edit func(string) string) *env {
	t.Helper()
	return newEnvWithPlugins(t, nodes, profileYAML, set, edit)
}

// newEnvWithPlugins is newEnvConfigured with more plugins registered
// beside set's (a test's own, which edit enables).
func newEnvWithPlugins(t *testing.T, nodes []trace.Node, profileYAML string, set *schedplugins.Set, edit func(string) string, more ...app.Option) *env {
	t.Helper()
	// The Workload API is served in every test of this package: its gangs
	// and the scheduler-plugins PodGroup's are placed side by side.
	c := harness.NewForTest(t, harness.Options{WorkloadAPI: true})
	ctx := t.Context()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	e := &env{t: t, c: c}
	if profileYAML != "" {
		e.setProfile(profileYAML)
	}
	if _, err := c.AddNodes(ctx, nodes, harness.NodeOptions{NoExporters: true, Heartbeat: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{
		Config: edit(schedulerConfig(t, c.Kubeconfig)), Plugins: append(set.Options(), more...),
	}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) setProfile(doc string) {
	e.t.Helper()
	cms := e.c.Client.CoreV1().ConfigMaps("kube-system")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: profile.DefaultConfigMapName},
		Data: map[string]string{profile.ConfigMapKey: doc}}
	if _, err := cms.Update(e.t.Context(), cm, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = cms.Create(e.t.Context(), cm, metav1.CreateOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
	} else if err != nil {
		e.t.Fatal(err)
	}
}

// gpuNodes are n hosts with 8 GPUs each.
func gpuNodes(prefix string, n int, labels func(i int) map[string]string) []trace.Node {
	out := make([]trace.Node, n)
	for i := range out {
		out[i] = trace.Node{Name: fmt.Sprintf("%s%02d", prefix, i), GPUs: 8, GPUModel: "H100", CPUMilli: 128000, MemoryMiB: 1 << 20}
		if labels != nil {
			out[i].Labels = labels(i)
		}
	}
	return out
}

type podOpt func(*corev1.Pod)

func inGang(name string) podOpt {
	return func(p *corev1.Pod) { p.Labels[podgroup.LabelPodGroup] = name }
}

func inQueue(q string) podOpt {
	return func(p *corev1.Pod) { p.Labels["kueue.x-k8s.io/queue-name"] = q }
}

func gated(p *corev1.Pod) {
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "schedloop.io/test-hold"}}
}

func annotated(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Annotations[k] = v }
}

func (e *env) pod(name, scheduler string, gpus int64, opts ...podOpt) {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			SchedulerName: scheduler,
			Containers: []corev1.Container{{Name: "main", Image: "train:1", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
				Limits:   corev1.ResourceList{harness.ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)},
			}}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(e.t.Context(), p, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) gang(name, scheduler string, members int, gpus int64, timeout int32, opts ...podOpt) {
	e.t.Helper()
	pg := podgroup.New(ns, name, int32(members))
	if timeout > 0 {
		pg.Spec.ScheduleTimeoutSeconds = ptr.To(timeout)
	}
	if _, err := podgroup.Create(e.t.Context(), e.c.Dynamic, pg); err != nil {
		e.t.Fatal(err)
	}
	for i := range members {
		e.pod(fmt.Sprintf("%s-%d", name, i), scheduler, gpus, append([]podOpt{inGang(name)}, opts...)...)
	}
}

// gangAPIs are the two ways a gang is declared; the gang tests run under
// both, through gangAs and waitGangReason.
var gangAPIs = []podgroup.API{podgroup.APIPodGroup, podgroup.APIWorkload}

// gangAs declares the gang name of members pods through api: a
// scheduler-plugins PodGroup (no timeout of its own) with labelled pods,
// or a Workload, its PodGroup and pods naming it.
func (e *env) gangAs(api podgroup.API, name, scheduler string, members int, gpus int64, opts ...podOpt) {
	e.t.Helper()
	if api == podgroup.APIWorkload {
		e.workloadGang(name, scheduler, members, gpus, opts...)
		return
	}
	e.gang(name, scheduler, members, gpus, 0, opts...)
}

// waitGangReason waits for a scheduling failure containing want on the
// gang name (see waitEvent) and returns its message: on its first member
// for a scheduler-plugins gang; on any member for a Workload API gang (see
// waitReasonOf).
func (e *env) waitGangReason(api podgroup.API, name, want string) string {
	e.t.Helper()
	if api == podgroup.APIWorkload {
		return e.waitReasonOf(name+"-", want)
	}
	return e.waitReason(name+"-0", want)
}

// placement maps pod name to node for pods whose name starts with prefix.
func (e *env) placement(prefix string) (bound map[string]string, pending int) {
	e.t.Helper()
	pods, err := e.c.Client.CoreV1().Pods(ns).List(e.t.Context(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	bound = map[string]string{}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, prefix) {
			continue
		}
		if p.Spec.NodeName != "" {
			bound[p.Name] = p.Spec.NodeName
		} else {
			pending++
		}
	}
	return bound, pending
}

func (e *env) waitBound(prefix string, want int) map[string]string {
	e.t.Helper()
	var bound map[string]string
	e.waitFor(fmt.Sprintf("%d pods %s* bound", want, prefix), func() bool {
		bound, _ = e.placement(prefix)
		return len(bound) >= want
	})
	return bound
}

func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.t.Context(), 100*time.Millisecond, 60*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		e.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitReason waits for a scheduling failure of pod whose message contains
// want (see waitEvent).
func (e *env) waitReason(pod, want string) string {
	e.t.Helper()
	return e.waitEvent(pod, want, func(name string) bool { return name == pod })
}

// waitEvent waits until the scheduler has reported, for a pod whose name
// matches, a failure whose message contains want, and returns the message.
// It reads both places the scheduler writes every failure's message to: a
// FailedScheduling Event's note and the pod's PodScheduled condition.
//
// Why not the Events alone: client-go's event recorder folds an Event into
// the one it recorded before for the same object, reason, action and
// reporter (its isomorphic key; the note is no part of it, the object's
// resourceVersion is) and only counts it in that Event's series, the note
// left as it was. The scheduler reports a failure on the pod as its
// informer holds it, so a pod tried again before the scheduler's status
// write of its last failure has come back through that informer (a gang
// member retried as soon as the gang's last member is created, on a loaded
// machine) fails at the same resourceVersion, and its new message is
// counted on the last failure's Event. Where nothing tries the pod again
// (it waits in the unschedulable pool for a cluster event), no Event ever
// carries that message; the condition holds the latest failure's.
func (e *env) waitEvent(pods, want string, match func(name string) bool) string {
	e.t.Helper()
	var note string
	e.waitFor(fmt.Sprintf("FailedScheduling on %s containing %q", pods, want), func() bool {
		evs, err := e.c.Client.EventsV1().Events(ns).List(e.t.Context(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if match(ev.Regarding.Name) && ev.Reason == "FailedScheduling" && strings.Contains(ev.Note, want) {
				note = ev.Note
				return true
			}
		}
		ps, err := e.c.Client.CoreV1().Pods(ns).List(e.t.Context(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, p := range ps.Items {
			if !match(p.Name) {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, want) {
					note = c.Message
					return true
				}
			}
		}
		return false
	})
	return note
}

func (e *env) deletePods(prefix string) {
	e.t.Helper()
	pods, err := e.c.Client.CoreV1().Pods(ns).List(e.t.Context(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, prefix) {
			if err := e.c.Client.CoreV1().Pods(ns).Delete(e.t.Context(), p.Name, *metav1.NewDeleteOptions(0)); err != nil && !apierrors.IsNotFound(err) {
				e.t.Fatal(err)
			}
		}
	}
	e.waitFor("pods "+prefix+"* gone", func() bool {
		b, p := e.placement(prefix)
		return len(b) == 0 && p == 0
	})
}

func nodesOf(bound map[string]string) []string {
	var out []string
	for _, n := range bound {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

var metav1ListAll = metav1.ListOptions{}

func formatFloat(v float64) string { return fmt.Sprintf("%g", v) }
