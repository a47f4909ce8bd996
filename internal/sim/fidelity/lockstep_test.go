package fidelity_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/player"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/schedplugins"
	"github.com/schedloop/schedloop/internal/trace"
)

// The live side runs in lock step with a virtual clock, as the simulator
// does: at each instant something happens (a job arrives, a job's run time
// ends) the driver holds the scheduler, applies every change of that
// instant, lets the scheduler go, and waits until it has nothing left to do
// before it reads the placements and moves the clock on. Completions are
// therefore exactly on time on both sides, and the scheduler sees the same
// set of waiting pods at once that the simulator's pass sees, in its own
// queue order. Nothing about a decision is changed: the stepper plugin
// below only delays pods on their way into the active queue, and a
// scheduling cycle until the pods turned away before it are forgotten.

const (
	stepperName = "DifferentialStepper"
	// labelMarker marks the pod the driver creates after a step's changes:
	// once the scheduler's queue has seen it, it has seen them all.
	labelMarker = "schedloop.io/step-marker"
	// labelFence marks the pod the driver has the scheduler try once it
	// looks idle: the scheduler runs one cycle at a time, so when the
	// fence's cycle begins, every earlier cycle has finished, its failure
	// handling (preemption's choice of victims, the pod's nomination)
	// included.
	labelFence = "schedloop.io/step-fence"
	namespace  = "default"
	ours       = "schedloop"
)

// stepper is a test-only plugin: PreEnqueue holds pods back while the
// driver applies a step's changes, and the other extension points count
// scheduling cycles begun (PreFilter, first in the profile's order) and
// ended (PostFilter, first in its order, for a pod no node takes; the
// scheduler's failure handling, after Unreserve, for one turned away after
// Reserve; PostBind for one bound), so the driver knows when none is in
// flight. A cycle that reaches PostFilter is counted
// ended before preemption runs; postFiltered tells the driver to wait for
// the fence pod's cycle, which begins only once preemption and the failed
// pod's nomination are done.
type stepper struct {
	paused         atomic.Bool
	started, ended atomic.Int64
	postFiltered   atomic.Int64 // PostFilter calls, the fence pods' left out
	handle         atomic.Pointer[fwk.Handle]

	mu      sync.Mutex
	markers map[string]bool
	fences  map[string]bool
	// forgetting are pods turned away after Reserve (a gang's members
	// rejected at Permit when the gang is released) that the scheduler
	// still counts on their nodes: it runs Unreserve, then forgets the pod
	// in its cache, then its failure handling, on the pod's binding
	// goroutine, beside the next scheduling cycles.
	forgetting map[types.UID]bool
}

func newStepper() *stepper {
	return &stepper{markers: map[string]bool{}, fences: map[string]bool{}, forgetting: map[types.UID]bool{}}
}

// setup has each scheduling cycle wait, before it takes its snapshot of the
// cache, until every pod turned away after Reserve is forgotten, as a
// replay's released gang frees its nodes before the next job is tried.
// Otherwise the members of a gang placed after a released one find the
// released members' GPUs taken or free by how far their goroutines got.
func (s *stepper) setup(sched *scheduler.Scheduler) {
	next, failed := sched.NextEntity, sched.FailureHandler
	sched.NextEntity = func(logger klog.Logger) (framework.QueuedEntityInfo, error) {
		s.waitForgotten()
		e, err := next(logger)
		// A gang released while the queue was empty.
		s.waitForgotten()
		return e, err
	}
	sched.FailureHandler = func(ctx context.Context, f framework.Framework, pi *framework.QueuedPodInfo, st *fwk.Status, ni *fwk.NominatingInfo, start time.Time) {
		failed(ctx, f, pi, st, ni, start)
		s.mu.Lock()
		if s.forgetting[pi.Pod.UID] {
			delete(s.forgetting, pi.Pod.UID)
			s.ended.Add(1)
		}
		s.mu.Unlock()
	}
}

func (s *stepper) waitForgotten() {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		s.mu.Lock()
		n := len(s.forgetting)
		s.mu.Unlock()
		if n == 0 {
			return
		}
	}
}

func (s *stepper) factory(_ context.Context, _ runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	s.handle.Store(&h)
	return s, nil
}

func (s *stepper) Name() string { return stepperName }

func (s *stepper) PreEnqueue(_ context.Context, pod *corev1.Pod) *fwk.Status {
	if m, ok := pod.Labels[labelMarker]; ok {
		s.mu.Lock()
		s.markers[m] = true
		s.mu.Unlock()
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "step marker")
	}
	if _, ok := pod.Labels[labelFence]; ok {
		return nil
	}
	if s.paused.Load() {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "held between steps")
	}
	return nil
}

func (s *stepper) PreFilter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if gs := state.GetPodGroupSchedulingCycle(); state.IsPodGroupSchedulingCycle() && gs != nil {
		// A Workload API gang's pod-group cycle tries its members one after
		// the other (a member more than once where it weighs several
		// placements): each member's cycle begins once, and ends when it
		// binds or, the group failing, at PodGroupPostFilter.
		g, _ := gs.Read(stepperName)
		members, _ := g.(*groupMembers)
		if members == nil {
			members = &groupMembers{uids: map[types.UID]bool{}}
			gs.Write(stepperName, members)
		}
		if members.uids[pod.UID] {
			return nil, nil
		}
		members.uids[pod.UID] = true
	}
	s.started.Add(1)
	if f, ok := pod.Labels[labelFence]; ok {
		s.mu.Lock()
		s.fences[f] = true
		s.mu.Unlock()
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "step fence")
	}
	return nil, nil
}

func (s *stepper) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

func (s *stepper) PostFilter(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if _, ok := pod.Labels[labelFence]; !ok {
		s.postFiltered.Add(1)
	}
	s.ended.Add(1)
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// groupMembers are the members whose cycles a pod-group cycle began.
type groupMembers struct{ uids map[types.UID]bool }

func (g *groupMembers) Clone() fwk.StateData { return g }

// PodGroupPostFilter ends the cycles of a failed pod-group cycle's
// members: the scheduler runs no PostFilter for them.
func (s *stepper) PodGroupPostFilter(_ context.Context, state fwk.PodGroupCycleState, _ fwk.PodGroupInfo, _ fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	if g, err := state.Read(stepperName); err == nil {
		s.postFiltered.Add(1)
		s.ended.Add(int64(len(g.(*groupMembers).uids)))
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

func (s *stepper) Reserve(context.Context, fwk.CycleState, *corev1.Pod, string) *fwk.Status {
	return nil
}

// Unreserve: a cycle turned away after Reserve ends once the scheduler
// has forgotten the pod (setup). Within a pod-group cycle every
// reservation is a trial the scheduler takes back whatever the outcome,
// which ends nothing.
func (s *stepper) Unreserve(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ string) {
	if state.IsPodGroupSchedulingCycle() {
		return
	}
	s.mu.Lock()
	s.forgetting[pod.UID] = true
	s.mu.Unlock()
}

func (s *stepper) PostBind(context.Context, fwk.CycleState, *corev1.Pod, string) { s.ended.Add(1) }

// inFlight is how many cycles have begun and not ended.
func (s *stepper) inFlight() int64 { return s.started.Load() - s.ended.Load() }

func (s *stepper) sawMarker(m string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.markers[m]
}

func (s *stepper) sawFence(f string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fences[f]
}

// schedulerConfig is the shipped configuration with the stepper added and
// the test cluster's connection.
func schedulerConfig(t testing.TB, kubeconfig string) string {
	t.Helper()
	shipped, err := os.ReadFile("../../../deploy/scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(shipped, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig, "qps": 5000, "burst": 5000}
	prof := cfg["profiles"].([]any)[0].(map[string]any)
	plugins := prof["plugins"].(map[string]any)
	multi := plugins["multiPoint"].(map[string]any)
	multi["enabled"] = append(multi["enabled"].([]any), map[string]any{"name": stepperName})
	// Named in both multiPoint and an extension point, the stepper runs
	// first there: its PreFilter counts cycles another PreFilter ends, and
	// its PostFilter runs before preemption's (and before the plugins the
	// shipped configuration names there, in their order).
	for _, point := range []string{"preFilter", "postFilter", "podGroupPostFilter"} {
		// Keep what the shipped configuration sets there (SchedloopPreemption
		// in place of DefaultPreemption), the stepper first.
		set, _ := plugins[point].(map[string]any)
		if set == nil {
			set = map[string]any{}
		}
		enabled, _ := set["enabled"].([]any)
		set["enabled"] = append([]any{map[string]any{"name": stepperName}}, enabled...)
		plugins[point] = set
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// clusterWithProfile starts an in-process cluster whose scheduling
// profile ConfigMap holds doc (and table, when not empty, as its
// predictor table).
func clusterWithProfile(t testing.TB, doc string, table ...string) *harness.Cluster {
	t.Helper()
	return clusterWith(t, harness.Options{}, doc, table...)
}

// clusterWith is clusterWithProfile on a cluster started with opts.
func clusterWith(t testing.TB, opts harness.Options, doc string, table ...string) *harness.Cluster {
	t.Helper()
	c := harness.NewForTest(t, opts)
	ctx := t.Context()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: profile.DefaultConfigMapName},
		Data:       profileData(doc, table...)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// liveJob is what the driver knows of one job on the live side.
type liveJob struct {
	j       trace.Job
	name    string // Kubernetes name
	running bool
	done    bool
	// start and nodes are of the job's last start.
	start       time.Duration
	started     bool
	nodes       []string
	preemptions int
	epoch       int
	// preemptor: the scheduler evicted pods for a member of the job (its
	// "Preempted" Events name the job's pod as the related object).
	preemptor bool
	// reason is the scheduler's message on the job's first pod at the
	// instant the simulator started the job and the scheduler did not.
	reason string
}

type liveEvent struct {
	at     time.Duration
	depart bool
	job    int
	epoch  int
	seq    int
}

// driver plays a scenario through kube-scheduler with schedloop's plugins.
type driver struct {
	t    testing.TB
	ctx  context.Context
	c    *harness.Cluster
	st   *stepper
	set  *schedplugins.Set
	pl   *player.Player
	pods corelisters.PodLister
	// lastEvent is when the driver's pod informer last saw a change (Unix ns).
	lastEvent atomic.Int64
	jobs      []*liveJob
	byName    map[string]int
	events    []liveEvent // by time, then by when they were pushed
	seq       int
	step      int
	// simStarts lists, per instant, the jobs the simulator started then.
	simStarts map[time.Duration][]int
	timing    [3]time.Duration // barrier, scheduling, observing
	nodes     []string
	// workloadGangs: gangs are declared through the Workload API.
	workloadGangs bool
	// preemptive: the workload has more than one priority, so pods may
	// preempt; fences and start stamps are only needed then.
	preemptive bool
	// fenced is the stepper's postFiltered count at the last fence.
	fenced int64
	fences int
	// stuck counts steps that ended with a nominated pod no event would
	// move (see waitQuiet).
	stuck int
	// syncs counts the sync pods (see handled).
	syncs int
	// dra: the nodes publish their GPUs through DRA, and pods' claims are
	// made and released by the ResourceClaim controller.
	dra bool
	// virtual is the instant being played, the scheduler's clock.
	virtual atomic.Int64
	// close stops the driver's informers, the scheduler and the cluster.
	close func()
}

func newDriver(t testing.TB, sc scenario) *driver {
	t.Helper()
	c := clusterWith(t, harness.Options{WorkloadAPI: sc.gangAPI == podgroup.APIWorkload}, sc.profile, sc.table)
	ctx, cancel := context.WithCancel(t.Context())
	// Pods run until the driver deletes them: no run time annotation, so
	// the harness's clock plays no part.
	if _, err := c.AddNodes(ctx, sc.inv.Nodes, harness.NodeOptions{NoExporters: true, Heartbeat: time.Minute, Workers: 8, DRA: sc.dra != nil}); err != nil {
		t.Fatal(err)
	}
	clock, err := harness.NewClock(1)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := player.New(c.Client, c.Dynamic, sc.jobs, player.Options{Clock: clock, SchedulerName: ours, Namespace: namespace, ClaimsFor: sc.dra, GangAPI: sc.gangAPI})
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.EnsureClaimTemplates(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pl.EnsurePriorityClasses(ctx); err != nil {
		t.Fatal(err)
	}
	d := &driver{t: t, ctx: ctx, c: c, st: newStepper(), pl: pl, byName: map[string]int{}, simStarts: map[time.Duration][]int{}, dra: sc.dra != nil}
	d.workloadGangs = sc.gangAPI == podgroup.APIWorkload
	for _, n := range sc.inv.Nodes {
		d.nodes = append(d.nodes, n.Name)
	}
	for _, j := range sc.jobs {
		d.preemptive = d.preemptive || j.Priority != sc.jobs[0].Priority
	}
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(namespace))
	inf := factory.Core().V1().Pods().Informer()
	touch := func(any) { d.lastEvent.Store(time.Now().UnixNano()) }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: touch, UpdateFunc: func(_, o any) { touch(o) }, DeleteFunc: touch}); err != nil {
		t.Fatal(err)
	}
	d.pods = factory.Core().V1().Pods().Lister()
	factory.Start(ctx.Done())
	d.close = func() {
		// Informers and the scheduler first: the apiserver's shutdown
		// waits for open watches.
		cancel()
		factory.Shutdown()
		c.Stop()
	}
	t.Cleanup(d.close)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	d.st.paused.Store(true)
	// Preemption measures run times, and reservations plan, on the virtual
	// clock, as the replay does.
	d.set = schedplugins.NewSetWithClock(func() time.Time { return startEpoch.Add(time.Duration(d.virtual.Load())) })
	d.set.TrackPods()
	plugins := append(d.set.Options(), app.WithPlugin(stepperName, d.st.factory))
	// The stepper holds pods at PreEnqueue while the driver applies a step,
	// but a pod whose backoff ends, or one the scheduler pops straight from
	// its backoff queue when the active queue is empty (SchedulerPopFromBackoffQ),
	// skips PreEnqueue there: PreEnqueue ran when it entered the queue. A
	// pod group whose cycle failed is returned to the backoff queue, and on
	// a wall-clock timer its next cycle began between two of a step's
	// changes, on a snapshot holding some and not others (a 16-member
	// Workload API gang placed beside a job whose pods were being
	// deleted). With the feature off, a pod leaving the backoff queue meets
	// PreEnqueue and the stepper, and waits for the step's activation, in
	// queue order, as every other waiting pod does. It decides no
	// placement: a pod is tried on the same cluster, only never mid-step.
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.SchedulerPopFromBackoffQ, false)
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{Config: schedulerConfig(t, c.Kubeconfig), Plugins: plugins, Setup: d.st.setup}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return d.st.handle.Load() != nil, nil
	}); err != nil {
		t.Fatalf("scheduler did not build its profile: %v", err)
	}
	for i, j := range sc.jobs {
		lj := &liveJob{j: j, name: player.KubeName(j.Name)}
		d.jobs = append(d.jobs, lj)
		d.byName[lj.name] = i
		d.push(liveEvent{at: j.Arrival, job: i})
	}
	return d
}

func (d *driver) push(e liveEvent) {
	e.seq = d.seq
	d.seq++
	i, _ := slices.BinarySearchFunc(d.events, e, func(a, b liveEvent) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return cmp.Compare(a.seq, b.seq)
	})
	d.events = slices.Insert(d.events, i, e)
}

// run plays every instant until nothing is left to happen.
func (d *driver) run() {
	var requeue []int
	for len(d.events) > 0 {
		now := d.events[0].at
		// Hold the scheduler, and let schedloop's plugins finish with the
		// last step before the clock moves: the reservation book dates a
		// bind, and the order a queue's charge, when its handler sees it.
		d.st.paused.Store(true)
		d.handled()
		d.virtual.Store(int64(now))
		var arrive, depart []int
		for len(d.events) > 0 && d.events[0].at == now {
			e := d.events[0]
			d.events = d.events[1:]
			switch {
			case !e.depart:
				arrive = append(arrive, e.job)
			case e.epoch == d.jobs[e.job].epoch && d.jobs[e.job].running:
				depart = append(depart, e.job)
			}
		}
		for _, i := range depart {
			d.deletePods(d.jobs[i])
			d.jobs[i].running, d.jobs[i].done = false, true
		}
		var created []*liveJob
		for _, i := range append(requeue, arrive...) {
			d.submit(d.jobs[i])
			created = append(created, d.jobs[i])
		}
		released := len(depart) > 0 || len(requeue) > 0
		requeue = nil
		t0 := time.Now()
		d.barrier(created)
		t1 := time.Now()
		d.st.paused.Store(false)
		d.activate(released, created)
		d.waitQuiet()
		t2 := time.Now()
		requeue = d.observe(now)
		d.timing[0] += t1.Sub(t0)
		d.timing[1] += t2.Sub(t1)
		d.timing[2] += time.Since(t2)
	}
	d.markPreemptors()
}

// markPreemptors reads the scheduler's "Preempted" Events, which name the
// victim and, as the related object, the pod it was evicted for.
func (d *driver) markPreemptors() {
	evs, err := d.c.Client.EventsV1().Events(namespace).List(d.ctx, metav1.ListOptions{})
	if err != nil {
		d.t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason != "Preempted" || e.Related == nil {
			continue
		}
		if i, ok := d.jobOf(e.Related.Name); ok {
			d.jobs[i].preemptor = true
		}
	}
}

func (d *driver) submit(lj *liveJob) {
	// The player declares a job of one pod as a lone pod, no gang of one.
	if err := d.pl.Declare(d.ctx, lj.name, lj.j); err != nil && !apierrors.IsAlreadyExists(err) {
		d.t.Fatalf("job %s: %v", lj.j.Name, err)
	}
	for m := range lj.j.Members {
		pod := d.pl.Pod(lj.name, m, lj.j)
		// Runs until deleted.
		delete(pod.Annotations, harness.AnnotationDuration)
		if _, err := d.c.Client.CoreV1().Pods(namespace).Create(d.ctx, pod, metav1.CreateOptions{}); err != nil {
			d.t.Fatalf("job %s: create pod %s: %v", lj.j.Name, pod.Name, err)
		}
	}
}

func (d *driver) jobPods(lj *liveJob) []*corev1.Pod {
	var out []*corev1.Pod
	for m := range lj.j.Members {
		if p, err := d.pods.Pods(namespace).Get(fmt.Sprintf("%s-%d", lj.name, m)); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func (d *driver) deletePods(lj *liveJob) {
	for m := range lj.j.Members {
		err := d.c.Client.CoreV1().Pods(namespace).Delete(d.ctx, fmt.Sprintf("%s-%d", lj.name, m), *metav1.NewDeleteOptions(0))
		if err != nil && !apierrors.IsNotFound(err) {
			d.t.Fatalf("job %s: delete: %v", lj.j.Name, err)
		}
	}
	if err := wait.PollUntilContextTimeout(d.ctx, 2*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(d.jobPods(lj)) == 0, nil
	}); err != nil {
		d.t.Fatalf("job %s: pods not gone: %v", lj.j.Name, err)
	}
}

// startEpoch is the wall time the virtual clock's zero is written as in a
// pod's status.startTime: far enough back that every virtual start lies in
// the past (a start in the future would make a pod look as if it had not
// run at all).
var startEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// stampStart writes the job's virtual start into its pods' startTime, once
// the harness's node has reported them running (with the wall time).
// DefaultPreemption prefers the node whose most important victims started
// last, reading startTime; the simulator compares virtual starts. With
// wall times, pods started at different instants of one lock step would
// order by how long each step took to play, or tie within a second.
func (d *driver) stampStart(lj *liveJob, now time.Duration) {
	at := metav1.NewTime(startEpoch.Add(now))
	patch := fmt.Appendf(nil, `{"status":{"startTime":%q}}`, at.UTC().Format(time.RFC3339))
	for m := range lj.j.Members {
		name := fmt.Sprintf("%s-%d", lj.name, m)
		if err := wait.PollUntilContextTimeout(d.ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			p, err := d.pods.Pods(namespace).Get(name)
			return err == nil && p.Status.StartTime != nil, nil
		}); err != nil {
			d.t.Fatalf("job %s: pod %s never reported running: %v", lj.j.Name, name, err)
		}
		if _, err := d.c.Client.CoreV1().Pods(namespace).Patch(d.ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			d.t.Fatalf("job %s: stamp the start of %s: %v", lj.j.Name, name, err)
		}
	}
}

// barrier returns once the scheduler has seen every change made so far:
// the watch delivers changes in order, so once the queue saw a marker pod
// created after them, it saw them, and so did the scheduler's cache, which
// the same handler feeds. schedloop's plugins follow pods on handlers of
// their own, which may lag behind: the barrier waits for them to handle
// the marker too, and their gang managers, which follow PodGroups on an
// informer of their own, to know the new gangs' groups. With DRA, the
// ResourceClaim controller first makes the new pods' claims and releases
// the ended pods' ones, and the scheduler's claim tracker, on an informer
// of its own, must have seen that.
func (d *driver) barrier(created []*liveJob) {
	d.step++
	for _, lj := range created {
		if lj.j.Members <= 1 || d.workloadGangs {
			// The scheduler's own informer serves Workload API groups.
			continue
		}
		if err := wait.PollUntilContextTimeout(d.ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			_, ok := d.set.GangSize(namespace, lj.name)
			return ok, nil
		}); err != nil {
			d.t.Fatalf("step %d: the gang managers never saw job %s's PodGroup: %v", d.step, lj.j.Name, err)
		}
	}
	if d.dra {
		d.waitClaimsSettled()
	}
	rv := d.probe(labelMarker, fmt.Sprintf("step-marker-%d", d.step), d.st.sawMarker)
	d.waitHandled(rv)
	if d.dra {
		d.waitClaimsTracked()
	}
}

// handled returns once schedloop's plugins have handled every pod change
// made so far, through a pod made after them (held by the stepper).
func (d *driver) handled() {
	d.syncs++
	d.waitHandled(d.probe(labelMarker, fmt.Sprintf("step-sync-%d", d.syncs), d.st.sawMarker))
}

// waitHandled returns once schedloop's plugins have handled the pod change
// at resourceVersion rv and every one before it.
func (d *driver) waitHandled(rv string) {
	if err := wait.PollUntilContextTimeout(d.ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return d.set.PodsHandled(rv), nil
	}); err != nil {
		d.t.Fatalf("step %d: schedloop's plugins never handled pod changes up to resourceVersion %s: %v", d.step, rv, err)
	}
}

// waitClaimsSettled returns once the ResourceClaim controller has done
// what the step's changes ask of it: every waiting pod's claims made from
// its templates exist and are recorded in its status, and every claim of
// a pod that is gone is released (no allocation, no consumer).
func (d *driver) waitClaimsSettled() {
	var why string
	if err := wait.PollUntilContextTimeout(d.ctx, 2*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := d.c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		claims, err := d.c.Client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		live, exists := map[types.UID]bool{}, map[string]bool{}
		for _, c := range claims.Items {
			exists[c.Name] = true
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			live[p.UID] = true
			if p.Spec.NodeName != "" {
				continue
			}
			for _, pc := range p.Spec.ResourceClaims {
				if pc.ResourceClaimTemplateName == nil {
					continue
				}
				made := ""
				for _, st := range p.Status.ResourceClaimStatuses {
					if st.Name == pc.Name && st.ResourceClaimName != nil {
						made = *st.ResourceClaimName
					}
				}
				if made == "" || !exists[made] {
					why = fmt.Sprintf("pod %s's claim %s not made yet", p.Name, pc.Name)
					return false, nil
				}
			}
		}
		for _, c := range claims.Items {
			for _, owner := range c.OwnerReferences {
				if owner.Kind == "Pod" && !live[owner.UID] && (c.Status.Allocation != nil || len(c.Status.ReservedFor) > 0) {
					why = fmt.Sprintf("claim %s of the ended pod %s not released yet", c.Name, owner.Name)
					return false, nil
				}
			}
		}
		return true, nil
	}); err != nil {
		d.t.Fatalf("step %d: ResourceClaims never settled (%s): %v", d.step, why, err)
	}
}

// waitClaimsTracked returns once the scheduler's claim tracker holds every
// ResourceClaim as the apiserver does: its allocations are what the
// DynamicResources plugin filters nodes by.
func (d *driver) waitClaimsTracked() {
	h := *d.st.handle.Load()
	var why string
	if err := wait.PollUntilContextTimeout(d.ctx, 2*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		claims, err := d.c.Client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		tracked, err := h.SharedDRAManager().ResourceClaims().List()
		if err != nil {
			return false, err
		}
		want := map[types.UID]string{}
		for _, c := range claims.Items {
			want[c.UID] = c.ResourceVersion
		}
		n := 0
		for _, c := range tracked {
			if c.Namespace != namespace {
				continue
			}
			n++
			if want[c.UID] != c.ResourceVersion {
				why = fmt.Sprintf("claim %s at resourceVersion %s, the apiserver's at %q", c.Name, c.ResourceVersion, want[c.UID])
				return false, nil
			}
		}
		if n != len(want) {
			why = fmt.Sprintf("%d claims tracked of %d", n, len(want))
			return false, nil
		}
		return true, nil
	}); err != nil {
		d.t.Fatalf("step %d: the scheduler's claim tracker never caught up (%s): %v", d.step, why, err)
	}
}

// activate moves waiting pods into the active queue at once: after a step
// that released resources every waiting pod, else only the new ones, as the
// simulator's pass retries a job only when something was released since it
// last failed. Pods come from the scheduler's own informer, which has seen
// everything the barrier waited for.
func (d *driver) activate(all bool, created []*liveJob) {
	h := *d.st.handle.Load()
	lister := h.SharedInformerFactory().Core().V1().Pods().Lister().Pods(namespace)
	pending := map[string]*corev1.Pod{}
	add := func(p *corev1.Pod) {
		if p.Spec.NodeName == "" && p.Labels[labelMarker] == "" && p.DeletionTimestamp == nil {
			pending[p.Namespace+"/"+p.Name] = p
		}
	}
	if all {
		pods, _ := lister.List(labels.Everything())
		for _, p := range pods {
			add(p)
		}
	}
	for _, lj := range created {
		for m := range lj.j.Members {
			p, err := lister.Get(fmt.Sprintf("%s-%d", lj.name, m))
			if err != nil {
				d.t.Fatalf("step %d: the scheduler has not seen pod %s-%d: %v", d.step, lj.name, m, err)
			}
			add(p)
		}
	}
	if len(pending) > 0 {
		h.Activate(klog.Background(), pending)
	}
}

// settle is how long the scheduler must stay idle (queues empty, every
// cycle it began ended) with no pod changing before a step counts as done:
// it covers the status writes and preemption deletions the scheduler makes
// just after a cycle ends.
const settle = 30 * time.Millisecond

// stuckAfter is how long a nominated pod may sit with the scheduler idle,
// no pod changing and no victim on its way out before the driver counts it
// stuck: its victims are gone, it was not retried, and nothing in the step
// will move it (the simulator, too, would only retry it when something is
// released). Preemption issues its deletions within milliseconds of the
// nomination, far inside this.
const stuckAfter = time.Second

// waitQuiet returns once the scheduler has nothing left to do: no cycle in
// flight or queued, no pod changing, no preemption victim on its way out,
// no failed cycle whose preemption has not been seen through (fence), and
// no pod waiting with a nominated node, which is in progress until it
// binds or its nomination clears.
func (d *driver) waitQuiet() {
	deadline := time.Now().Add(2 * time.Minute)
	var idleSince time.Time
	for time.Now().Before(deadline) {
		time.Sleep(3 * time.Millisecond)
		if !d.schedulerIdle() {
			idleSince = time.Time{}
			continue
		}
		if idleSince.IsZero() {
			idleSince = time.Now()
		}
		quietFor := time.Since(time.Unix(0, d.lastEvent.Load()))
		if time.Since(idleSince) < settle || quietFor < settle || d.podsInMotion() {
			continue
		}
		if pf := d.st.postFiltered.Load(); d.preemptive && pf != d.fenced {
			d.fence()
			d.fenced = pf
			idleSince = time.Time{}
			continue
		}
		if nominated := d.nominatedPending(); len(nominated) > 0 {
			if quietFor < stuckAfter || time.Since(idleSince) < stuckAfter {
				continue
			}
			d.stuck++
		}
		return
	}
	d.t.Fatalf("step %d: scheduler still busy after 2 minutes (active %v, backoff %v, cycles in flight %d, binding %v, preempting %v, last pod change %v ago, in motion: %v)",
		d.step, gauge(schedmetrics.ActivePods()), gauge(schedmetrics.BackoffPods()), d.st.inFlight(),
		gauge(schedmetrics.Goroutines.WithLabelValues(schedmetrics.Binding)), gauge(schedmetrics.Goroutines.WithLabelValues("DefaultPreemption")),
		time.Since(time.Unix(0, d.lastEvent.Load())), d.inMotion())
}

// fence has the scheduler try a pod that no node takes and returns once
// its cycle has begun: every cycle before it, with its preemption and
// nomination, is then over.
func (d *driver) fence() {
	d.fences++
	d.probe(labelFence, fmt.Sprintf("step-fence-%d", d.fences), d.st.sawFence)
}

// probe creates a pod labelled label=name for the scheduler, waits until
// the stepper saw it, and deletes it. It returns the resourceVersion the
// pod was created at.
func (d *driver) probe(label, name string, saw func(string) bool) string {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{label: name}},
		Spec: corev1.PodSpec{SchedulerName: ours, TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "main", Image: "probe"}}},
	}
	pods := d.c.Client.CoreV1().Pods(namespace)
	made, err := pods.Create(d.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		d.t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(d.ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return saw(name), nil
	}); err != nil {
		d.t.Fatalf("step %d: the scheduler never saw %s: %v", d.step, name, err)
	}
	if err := pods.Delete(d.ctx, name, *metav1.NewDeleteOptions(0)); err != nil {
		d.t.Fatal(err)
	}
	return made.ResourceVersion
}

// nominatedPending lists the workload's pods the scheduler holds nominated
// to a node and has not bound: each preempted, or is about to bind where
// its victims were.
func (d *driver) nominatedPending() []string {
	h := *d.st.handle.Load()
	var out []string
	for _, n := range d.nodes {
		for _, pi := range h.NominatedPodsForNode(n) {
			if p := pi.GetPod(); p.Namespace == namespace && p.Spec.NodeName == "" {
				out = append(out, p.Name)
			}
		}
	}
	return out
}

// jobOf maps a pod name (<job>-<member>) to its job.
func (d *driver) jobOf(pod string) (int, bool) {
	k := strings.LastIndexByte(pod, '-')
	if k < 0 {
		return 0, false
	}
	i, ok := d.byName[pod[:k]]
	return i, ok
}

func (d *driver) schedulerIdle() bool {
	// kube-scheduler puts a pod group whose cycle failed in its backoff
	// queue, where SchedloopGang's PreEnqueue holds it until an event wakes
	// it (core.Manager.Gated), and its count of pods in backoff keeps them
	// after they leave it: for Workload API gangs the count says nothing.
	backoff := gauge(schedmetrics.BackoffPods())
	if d.workloadGangs {
		backoff = 0
	}
	return d.st.inFlight() == 0 && gauge(schedmetrics.ActivePods()) == 0 && backoff == 0 &&
		gauge(schedmetrics.Goroutines.WithLabelValues(schedmetrics.Binding)) == 0 &&
		gauge(schedmetrics.Goroutines.WithLabelValues("DefaultPreemption")) == 0
}

func gauge(g metrics.GaugeMetric) float64 {
	v, err := testutil.GetGaugeMetricValue(g)
	if err != nil {
		panic(err)
	}
	return v
}

// podsInMotion: a pod being deleted (a preemption victim on its way out)
// means the scheduler's work is not done.
func (d *driver) podsInMotion() bool { return len(d.inMotion()) > 0 }

func (d *driver) inMotion() []string {
	var out []string
	all, _ := d.pods.Pods(namespace).List(labels.Everything())
	for _, p := range all {
		if p.DeletionTimestamp != nil {
			out = append(out, p.Name)
		}
	}
	return out
}

// observe reads the placements after the instant now: jobs whose members
// are all bound started now; running jobs that lost a member were
// preempted, and like the simulator's they are stopped whole and return to
// the queue (resubmitted at the next instant).
func (d *driver) observe(now time.Duration) (requeue []int) {
	// A list from the apiserver, not the informer: every binding the
	// scheduler finished is in it, however late its watch event comes.
	list, err := d.c.Client.CoreV1().Pods(namespace).List(d.ctx, metav1.ListOptions{})
	if err != nil {
		d.t.Fatal(err)
	}
	byName := map[string]*corev1.Pod{}
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	listed := func(lj *liveJob) []*corev1.Pod {
		var out []*corev1.Pod
		for m := range lj.j.Members {
			if p := byName[fmt.Sprintf("%s-%d", lj.name, m)]; p != nil {
				out = append(out, p)
			}
		}
		return out
	}
	for i, lj := range d.jobs {
		if lj.done || lj.j.Arrival > now {
			continue
		}
		pods := listed(lj)
		var nodes []string
		for _, p := range pods {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				nodes = append(nodes, p.Spec.NodeName)
			}
		}
		switch {
		case lj.running && len(nodes) < lj.j.Members:
			d.deletePods(lj)
			lj.running = false
			lj.epoch++
			lj.preemptions++
			requeue = append(requeue, i)
		case !lj.running && len(nodes) == lj.j.Members:
			slices.Sort(nodes)
			lj.running, lj.started, lj.start, lj.nodes = true, true, now, nodes
			d.push(liveEvent{at: now + lj.j.Duration, depart: true, job: i, epoch: lj.epoch})
			if d.preemptive {
				d.stampStart(lj, now)
			}
		}
	}
	for _, i := range d.simStarts[now] {
		lj := d.jobs[i]
		if lj.running && lj.start == now || len(lj.j.Name) == 0 {
			continue
		}
		for _, p := range listed(lj) {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && lj.reason == "" {
					lj.reason = strings.TrimSpace(c.Message)
				}
			}
		}
	}
	// Jobs preempted together come back together: the replay gives them one
	// arrival (scoring.QueueKey.Requeued) and breaks the tie lone pods
	// first, then by name (scoring.CompareQueueKeys); the live queue orders
	// them by when their pods are created, so they are created in that order.
	slices.SortStableFunc(requeue, func(a, b int) int {
		ga, gb := d.jobs[a].j.Members > 1, d.jobs[b].j.Members > 1
		if ga != gb {
			if ga {
				return 1
			}
			return -1
		}
		return strings.Compare(d.jobs[a].j.Name, d.jobs[b].j.Name)
	})
	return requeue
}
