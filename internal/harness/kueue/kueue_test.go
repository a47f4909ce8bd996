package kueue_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kueueapi "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/kueue"
	"github.com/schedloop/schedloop/internal/kueuereplay"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/schedplugins"
	"github.com/schedloop/schedloop/internal/schedplugins/schedtest"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
	"github.com/schedloop/schedloop/internal/trace"
	"github.com/schedloop/schedloop/internal/why"
)

const ns = "default"

// env is a harness cluster with four 8-GPU hosts in two NVLink domains,
// schedloop's scheduler and Kueue with two teams' ClusterQueues in one
// cohort.
type env struct {
	t     *testing.T
	c     *harness.Cluster
	k     *kueue.Kueue
	nodes []trace.Node
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := harness.NewForTest(t, harness.Options{})
	ctx := t.Context()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var nodes []trace.Node
	for i, d := range []string{"d1", "d1", "d2", "d2"} {
		nodes = append(nodes, trace.Node{Name: fmt.Sprintf("h%02d", i), GPUs: 8, GPUModel: "H100", CPUMilli: 128000, MemoryMiB: 1 << 20,
			Labels: map[string]string{trace.LabelSpine: "s1", trace.LabelRack: "r1", trace.LabelNVLinkDomain: d}})
	}
	if _, err := c.AddNodes(ctx, nodes, harness.NodeOptions{NoExporters: true, Heartbeat: time.Minute}); err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile("../../../deploy/scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{
		Config: schedtest.WithStockProfile(string(shipped), c.Kubeconfig), Plugins: schedplugins.NewSet().Options(),
	}); err != nil {
		t.Fatal(err)
	}
	k, err := kueue.Start(ctx, c.Config, kueue.Options{FairSharing: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.Stop(); err != nil {
			t.Errorf("kueue stopped with %v", err)
		}
	})
	e := &env{t: t, c: c, k: k, nodes: nodes}
	e.queues()
	return e
}

// collect runs the collector's watcher into a fresh database until the
// returned stop, which waits for its last write.
func (e *env) collect() (*store.Store, func()) {
	e.t.Helper()
	s := storetest.New(e.t)
	w, err := events.NewWatcher(events.WatchOptions{Client: e.c.Client, Dynamic: e.c.Dynamic, Store: s, FlushInterval: 100 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	e.waitFor("the watcher's informers to list", w.Synced)
	return s, func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("watcher: %v", err)
		}
	}
}

// queues: a ResourceFlavor per GPU model; team-a and team-b each own 16 of
// the 32 GPUs in cohort "research", may lend all of them and borrow up to 16,
// and reclaim what they lent.
func (e *env) queues() {
	ctx := e.t.Context()
	nodes, err := e.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	flavors := kueue.FlavorsByGPUModel(nodes.Items)
	if len(flavors) != 1 || flavors[0].Name != "h100" {
		e.t.Fatalf("flavors = %v, want one named h100", flavors)
	}
	e.create(flavors[0])
	q := func(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
	for _, team := range []string{"team-a", "team-b"} {
		e.create(&kueueapi.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: team},
			Spec: kueueapi.ClusterQueueSpec{
				CohortName:        "research",
				NamespaceSelector: &metav1.LabelSelector{},
				ResourceGroups: []kueueapi.ResourceGroup{{
					CoveredResources: []corev1.ResourceName{corev1.ResourceCPU, podspec.ResourceGPU},
					Flavors: []kueueapi.FlavorQuotas{{Name: "h100", Resources: []kueueapi.ResourceQuota{
						{Name: corev1.ResourceCPU, NominalQuota: q(256)},
						{Name: podspec.ResourceGPU, NominalQuota: q(16), BorrowingLimit: ptr.To(q(16)), LendingLimit: ptr.To(q(16))},
					}}},
				}},
				Preemption: &kueueapi.ClusterQueuePreemption{ReclaimWithinCohort: kueueapi.PreemptionPolicyAny},
			},
		})
		e.create(&kueueapi.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: team},
			Spec:       kueueapi.LocalQueueSpec{ClusterQueue: kueueapi.ClusterQueueReference(team)},
		})
	}
}

func (e *env) create(o client.Object) {
	e.t.Helper()
	if err := e.k.Client.Create(e.t.Context(), o); err != nil {
		e.t.Fatalf("create %T %s: %v", o, o.GetName(), err)
	}
}

// gang submits members x 8 GPUs through queue, running far past the test.
func (e *env) gang(name, queue string, members int32, annotations map[string]string) {
	e.t.Helper()
	a := map[string]string{harness.AnnotationDuration: "10h"}
	for k, v := range annotations {
		a[k] = v
	}
	err := e.k.Submit(e.t.Context(), kueue.Gang{Namespace: ns, Name: name, Queue: queue, Members: members, Pod: corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: a},
		Spec:       eightGPUs("train:1"),
	}})
	if err != nil {
		e.t.Fatal(err)
	}
}

// eightGPUs is the spec of a pod schedloop places, never restarted, whose
// one container runs image on one CPU and a host's 8 GPUs.
func eightGPUs(image string) corev1.PodSpec {
	gpus := *resource.NewQuantity(8, resource.DecimalSI)
	return corev1.PodSpec{
		SchedulerName: "schedloop",
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "main", Image: image, Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), podspec.ResourceGPU: gpus},
			Limits:   corev1.ResourceList{podspec.ResourceGPU: gpus},
		}}},
	}
}

func (e *env) workload(name string) *kueueapi.Workload {
	e.t.Helper()
	var wl kueueapi.Workload
	if err := e.k.Client.Get(e.t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &wl); err != nil {
		e.t.Fatal(err)
	}
	return &wl
}

// condition is the workload's condition of that type, nil while Kueue has
// not written it or has not yet made the Workload: Kueue's job reconciler
// creates it from the gang's pods a moment after they exist, so a wait that
// starts right after the gang was submitted can see none.
func (e *env) condition(name, conditionType string) *metav1.Condition {
	e.t.Helper()
	var wl kueueapi.Workload
	err := e.k.Client.Get(e.t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &wl)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return apimeta.FindStatusCondition(wl.Status.Conditions, conditionType)
}

// waitQuotaReserved waits for the workload's QuotaReserved condition to
// have status and returns it.
func (e *env) waitQuotaReserved(what, name string, status metav1.ConditionStatus) *metav1.Condition {
	e.t.Helper()
	var qr *metav1.Condition
	e.waitFor(what, func() bool {
		qr = e.condition(name, kueueapi.WorkloadQuotaReserved)
		return qr != nil && qr.Status == status
	})
	return qr
}

// waitFailedScheduling waits for a FailedScheduling event about one of the
// gang's pods and returns the last one listed.
func (e *env) waitFailedScheduling(gang string) *corev1.Event {
	e.t.Helper()
	var failed *corev1.Event
	e.waitFor("the scheduler to find no room for "+gang, func() bool {
		evs, err := e.c.Client.CoreV1().Events(ns).List(e.t.Context(), metav1.ListOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		for i, ev := range evs.Items {
			if ev.Reason == "FailedScheduling" && strings.HasPrefix(ev.InvolvedObject.Name, gang) {
				failed = &evs.Items[i]
			}
		}
		return failed != nil
	})
	return failed
}

// pods lists the gang's pods.
func (e *env) pods(gang string) []corev1.Pod {
	e.t.Helper()
	pods, err := e.c.Client.CoreV1().Pods(ns).List(e.t.Context(), metav1.ListOptions{LabelSelector: podgroup.LabelPodGroup + "=" + gang})
	if err != nil {
		e.t.Fatal(err)
	}
	return pods.Items
}

// boundAt is when the last of the pods was bound.
func boundAt(pods []corev1.Pod) time.Time {
	var last time.Time
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && c.LastTransitionTime.After(last) {
				last = c.LastTransitionTime.Time
			}
		}
	}
	return last
}

// bound lists the nodes of the gang's live members that are bound.
func (e *env) bound(gang string) (nodes []string, live int) {
	e.t.Helper()
	for _, p := range e.pods(gang) {
		if p.DeletionTimestamp != nil {
			continue
		}
		live++
		if p.Spec.NodeName != "" {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	slices.Sort(nodes)
	return nodes, live
}

func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.t.Context(), 100*time.Millisecond, 60*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		e.t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (e *env) waitRunning(gang string, members int) []string {
	e.t.Helper()
	var nodes []string
	e.waitFor(gang+" admitted by Kueue and placed", func() bool {
		nodes, _ = e.bound(gang)
		return len(nodes) == members
	})
	return nodes
}

// nextSecond waits for the wall clock to pass into the next second:
// creation and condition times are kept to the second, and Kueue orders
// and picks victims by them.
func (e *env) nextSecond() {
	e.t.Helper()
	start := time.Now().Truncate(time.Second)
	e.waitFor("the next second", func() bool { return time.Now().Truncate(time.Second).After(start) })
}

func domainOf(node string) string {
	if node == "h00" || node == "h01" {
		return "d1"
	}
	return "d2"
}

// TestKueueReclaimThenSchedloopPlaces: team-a fills the cluster, borrowing
// team-b's 16 GPUs for its second gang; team-b's gang arrives, Kueue
// reclaims the borrowed quota by preempting one of team-a's gangs, and
// schedloop places team-b's gang within one NVLink domain, the one the
// evicted gang freed. The collector stores the victim's admission history
// as Kueue wrote it, and kueuereplay, fed the same ClusterQueues and
// Workloads, admits and evicts in the order Kueue did.
func TestKueueReclaimThenSchedloopPlaces(t *testing.T) {
	e := newEnv(t)
	db, stopCollecting := e.collect()
	e.gang("a1", "team-a", 2, nil)
	a1 := e.waitRunning("a1", 2)
	e.nextSecond()
	e.gang("a2", "team-a", 2, nil)
	a2 := e.waitRunning("a2", 2)
	t.Logf("team-a: a1 on %v, a2 on %v", a1, a2)
	if domainOf(a2[0]) != domainOf(a2[1]) || domainOf(a1[0]) == domainOf(a2[0]) {
		t.Fatalf("team-a's gangs on %v and %v, want one NVLink domain each", a1, a2)
	}
	// The ClusterQueue's status is written after the admission it counts.
	borrowed := int64(-1)
	e.waitFor("team-a's status to show 16 GPUs borrowed", func() bool {
		var cq kueueapi.ClusterQueue
		if err := e.k.Client.Get(t.Context(), types.NamespacedName{Name: "team-a"}, &cq); err != nil {
			t.Fatal(err)
		}
		for _, f := range cq.Status.FlavorsReservation {
			for _, r := range f.Resources {
				if r.Name == podspec.ResourceGPU {
					borrowed = r.Borrowed.Value()
				}
			}
		}
		return borrowed == 16
	})

	e.nextSecond()
	e.gang("b1", "team-b", 2, map[string]string{podspec.AnnotationTopologyRequired: trace.LabelNVLinkDomain})
	b1 := e.waitRunning("b1", 2)
	t.Logf("team-b: b1 on %v", b1)

	// Borrowing is the ClusterQueue's, not a workload's: Kueue picks which of
	// team-a's gangs gives the quota back. Exactly one must have.
	placed := map[string][]string{"a1": a1, "a2": a2}
	var victim, kept string
	var pre *metav1.Condition
	for _, name := range []string{"a1", "a2"} {
		c := apimeta.FindStatusCondition(e.workload(name).Status.Conditions, kueueapi.WorkloadPreempted)
		if c != nil && c.Status == metav1.ConditionTrue {
			if victim != "" {
				t.Fatalf("both a1 and a2 preempted; 16 GPUs of reclaim needs one")
			}
			victim, pre = name, c
		} else {
			kept = name
		}
	}
	if victim == "" {
		t.Fatalf("b1 runs but neither of team-a's gangs was preempted")
	}
	if pre.Reason != kueueapi.InCohortReclamationReason && pre.Reason != kueueapi.InCohortFairSharingReason {
		t.Fatalf("%s preempted for %s (%s), want reclamation within the cohort", victim, pre.Reason, pre.Message)
	}
	t.Logf("%s preempted: %s: %s", victim, pre.Reason, pre.Message)
	if domainOf(b1[0]) != domainOf(b1[1]) || domainOf(b1[0]) != domainOf(placed[victim][0]) {
		t.Fatalf("b1 on %v, want both members in %s, the domain %s left", b1, domainOf(placed[victim][0]), victim)
	}
	f, waiting := events.ParseWorkloadCondition(pre.Type, string(pre.Status), pre.Reason, pre.Message)
	if !waiting || f.Category != schedloop.WaitPreemption {
		t.Errorf("%s's Preempted condition filed under %s (waiting %v), want preemption", victim, f.Category, waiting)
	}
	e.waitQuotaReserved(victim+" requeued, waiting for quota", victim, metav1.ConditionFalse)
	if nodes, live := e.bound(victim); len(nodes) != 0 || live != 2 {
		t.Fatalf("%s after reclaim: %d live members, bound on %v; want 2 gated, none bound", victim, live, nodes)
	}
	if now, _ := e.bound(kept); !slices.Equal(now, placed[kept]) {
		t.Fatalf("%s moved from %v to %v; only one gang should be reclaimed", kept, placed[kept], now)
	}

	// The collector kept the victim's admission history as Kueue wrote it:
	// quota reserved in team-a on h100, preempted for the reclaim, waiting
	// for quota again.
	stopCollecting()
	stored, err := db.KueueWorkloads(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]schedloop.KueueWorkload{}
	for _, w := range stored {
		byName[w.Name] = w
	}
	live := e.workload(victim)
	got, ok := byName[victim]
	if !ok {
		t.Fatalf("collector stored %d workloads, not %s", len(stored), victim)
	}
	if got.UID != string(live.UID) || !got.CreatedAt.Equal(live.CreationTimestamp.Time) || got.LocalQueue != "team-a" ||
		got.ClusterQueue != "team-a" || got.Flavors[string(podspec.ResourceGPU)] != "h100" {
		t.Errorf("stored %s = %+v, want uid %s created %v in team-a with nvidia.com/gpu on h100", victim, got, live.UID, live.CreationTimestamp)
	}
	var history []string
	for _, c := range got.Conditions {
		history = append(history, c.Type+"="+c.Status+"/"+c.Reason)
		t.Logf("%s %s %s=%s %s (%s)", victim, c.At.Format("15:04:05.000"), c.Type, c.Status, c.Reason, c.Category)
	}
	for _, want := range []struct {
		cond     *metav1.Condition
		category schedloop.WaitCategory
	}{
		{apimeta.FindStatusCondition(live.Status.Conditions, kueueapi.WorkloadPreempted), schedloop.WaitPreemption},
		{apimeta.FindStatusCondition(live.Status.Conditions, kueueapi.WorkloadQuotaReserved), schedloop.WaitQuota},
	} {
		if !slices.ContainsFunc(got.Conditions, func(c schedloop.KueueCondition) bool {
			return c.Type == want.cond.Type && c.Status == string(want.cond.Status) && c.Reason == want.cond.Reason &&
				c.At.Equal(want.cond.LastTransitionTime.Time) && c.Category == want.category
		}) {
			t.Errorf("stored history %v lacks Kueue's %s=%s/%s at %v filed under %s", history,
				want.cond.Type, want.cond.Status, want.cond.Reason, want.cond.LastTransitionTime, want.category)
		}
	}
	if !slices.Contains(history, "QuotaReserved=True/QuotaReserved") || !slices.Contains(history, "Admitted=True/Admitted") {
		t.Errorf("stored history %v lacks the first admission", history)
	}

	// The collector stored both ClusterQueues' specs as Kueue holds them.
	specs, err := db.KueueClusterQueues(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var liveCQs kueueapi.ClusterQueueList
	if err := e.k.Client.List(t.Context(), &liveCQs); err != nil {
		t.Fatal(err)
	}
	if len(specs) != len(liveCQs.Items) {
		t.Fatalf("collector stored %d ClusterQueues, Kueue has %d", len(specs), len(liveCQs.Items))
	}
	// The client's list comes from its cache, in no stated order.
	slices.SortFunc(liveCQs.Items, func(a, b kueueapi.ClusterQueue) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(specs, func(a, b schedloop.KueueClusterQueue) int { return strings.Compare(a.Name, b.Name) })
	for i, cq := range liveCQs.Items {
		want := events.KueueClusterQueueOf(cq, specs[i].ObservedAt)
		for j := range want.Quotas {
			// Kueue's status moves on after the collector's last flush.
			want.Quotas[j].Reserved, want.Quotas[j].Borrowed = specs[i].Quotas[j].Reserved, specs[i].Quotas[j].Borrowed
		}
		if !reflect.DeepEqual(specs[i], want) || specs[i].Cohort != "research" || specs[i].ReclaimWithinCohort != "Any" {
			t.Errorf("stored ClusterQueue %+v, Kueue's spec %+v", specs[i], want)
		}
	}

	// The victim's wait timeline, as the collector explains it, ends waiting
	// for quota in its ClusterQueue since the preemption.
	tl := timeline(t, db, victim)
	for _, iv := range tl {
		t.Logf("%s timeline: %s %s..%s %s", victim, iv.State, iv.Start.Format("15:04:05.000"), iv.End.Format("15:04:05.000"), iv.Label)
	}
	if n := len(tl); n == 0 || tl[n-1].Category != string(schedloop.WaitQuota) ||
		!tl[n-1].Start.Equal(pre.LastTransitionTime.Time) ||
		!strings.HasPrefix(tl[n-1].Label, "waiting for quota in ClusterQueue team-a (borrowing from cohort research: cpu on h100 nominal 256, as much more as the cohort lends; nvidia.com/gpu on h100 nominal 16, up to 16 more)") {
		t.Errorf("%s's timeline %+v: want it to end waiting for quota in ClusterQueue team-a since %v", victim, tl, pre.LastTransitionTime)
	}

	// The simulator's replay behind Kueue, from the same objects, admits and
	// evicts in the order Kueue did, as the collector recorded it, and
	// places what it admits.
	liveSteps := liveOrder(stored)
	replayed := e.replay()
	t.Logf("live:     %v", liveSteps)
	t.Logf("replayed: %v", replayed)
	if !slices.Equal(liveSteps, replayed) {
		t.Errorf("replayed admission order %v, live %v", replayed, liveSteps)
	}
}

// timeline is the gang's job's timeline as the collector's store explains
// it.
func timeline(t *testing.T, db *store.Store, gang string) []why.Interval {
	t.Helper()
	b := why.Builder{Store: db}
	m, err := b.Resolve(t.Context(), ns+"/"+gang, "job")
	if err != nil {
		t.Fatal(err)
	}
	story, err := b.Job(t.Context(), m.UID)
	if err != nil {
		t.Fatal(err)
	}
	return story.Timeline
}

// liveOrder is the admissions and preemptions the collector stored, in time
// order: "admit a1", "evict a2".
func liveOrder(stored []schedloop.KueueWorkload) []string {
	type step struct {
		at   time.Time
		what string
	}
	var steps []step
	for _, w := range stored {
		for _, c := range w.Conditions {
			switch {
			case c.Type == kueueapi.WorkloadQuotaReserved && c.Status == "True":
				steps = append(steps, step{c.At, "admit " + w.Name})
			case c.Type == kueueapi.WorkloadPreempted && c.Status == "True":
				steps = append(steps, step{c.At, "evict " + w.Name})
			}
		}
	}
	// At one instant the eviction comes first: the admission it made room
	// for follows it.
	slices.SortStableFunc(steps, func(a, b step) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		if (a.what[0] == 'e') != (b.what[0] == 'e') {
			if a.what[0] == 'e' {
				return -1
			}
			return 1
		}
		return strings.Compare(a.what, b.what)
	})
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.what
	}
	return out
}

// replay runs the simulator behind Kueue (sim.Config.Kueue, whose quota
// replay is kueuereplay's) over the cluster's own nodes, ClusterQueues,
// LocalQueues and Workloads, with fair sharing on as Kueue runs here, and
// returns its admissions and evictions up to now. Every job the replay
// admitted by now must start in the simulator's placement at its admission,
// as the live scheduler placed each admitted gang at once.
func (e *env) replay() []string {
	e.t.Helper()
	r := e.simulate(nil)
	now := time.Since(r.origin)
	for i, j := range r.jobs {
		if at, ok := r.res.Kueue.Admitted[j.Name]; ok && at <= now && (r.res.Jobs[i].Start != at || r.res.Jobs[i].State == sim.Unfinished) {
			e.t.Errorf("simulator: %s admitted at %v, placed %+v; want it started at its admission", j.Name, at, r.res.Jobs[i])
		}
	}
	return r.steps()
}

// simulation is a replay behind Kueue: its jobs (Kueue's workloads, then
// the extra jobs), their outcomes, and the wall time its 0 stands for.
type simulation struct {
	jobs   []sim.Job
	res    sim.Result
	origin time.Time
}

// outsideJob is a job that does not go through Kueue, arriving at a wall
// time.
type outsideJob struct {
	job    sim.Job
	arrive time.Time
}

// replayInput is kueue.ReplayInput over the ClusterQueues, LocalQueues and
// Workloads Kueue holds, each workload running 10h, in arrival order, with
// the Workloads it was made from.
func (e *env) replayInput() (scoring.KueueCohort, []kueuereplay.Workload, []kueueapi.Workload) {
	e.t.Helper()
	ctx := e.t.Context()
	var cqs kueueapi.ClusterQueueList
	var lqs kueueapi.LocalQueueList
	var wls kueueapi.WorkloadList
	for _, l := range []client.ObjectList{&cqs, &lqs, &wls} {
		if err := e.k.Client.List(ctx, l); err != nil {
			e.t.Fatal(err)
		}
	}
	cohort, workloads, err := kueue.ReplayInput(cqs.Items, lqs.Items, wls.Items, 10*time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	slices.SortFunc(workloads, func(a, b kueuereplay.Workload) int {
		return cmp.Or(a.Arrive.Compare(b.Arrive), strings.Compare(a.Key, b.Key))
	})
	return cohort, workloads, wls.Items
}

// simulate replays the cluster's Workloads behind Kueue, with extra jobs
// outside Kueue queued at their arrival.
func (e *env) simulate(extra []outsideJob) simulation {
	e.t.Helper()
	cohort, workloads, wls := e.replayInput()
	origin := workloads[0].Arrive
	for _, x := range extra {
		if x.arrive.Before(origin) {
			origin = x.arrive
		}
	}
	front := sim.KueueFront{Cohort: cohort, FairSharing: true, Jobs: map[string]sim.KueueJob{}}
	var jobs []sim.Job
	for _, w := range workloads {
		i := slices.IndexFunc(wls, func(wl kueueapi.Workload) bool { return wl.Namespace+"/"+wl.Name == w.Key })
		ps := wls[i].Spec.PodSets[0]
		gpus := ps.Template.Spec.Containers[0].Resources.Requests[podspec.ResourceGPU]
		jobs = append(jobs, sim.Job{Name: w.Key, Arrival: w.Arrive.Sub(origin), Duration: w.Run, Members: int(ps.Count),
			Request: scoring.Request{GPUs: int(gpus.Value())}, Priority: w.Priority, Util: 1})
		front.Jobs[w.Key] = sim.KueueJob{Queue: w.Queue, Ask: w.Ask}
	}
	for _, x := range extra {
		x.job.Arrival = x.arrive.Sub(origin)
		jobs = append(jobs, x.job)
	}
	res, err := sim.Run(sim.NewCluster(trace.Inventory{Nodes: e.nodes}), jobs, sim.Config{Params: scoring.DefaultParams(), Kueue: &front})
	if err != nil {
		e.t.Fatal(err)
	}
	return simulation{jobs: jobs, res: res, origin: origin}
}

// steps is the replay's admissions and evictions up to now: "admit a1",
// "evict a2". The replay plays on to the last finish, hours ahead; the
// cluster has lived until now.
func (r simulation) steps() []string {
	now := time.Since(r.origin)
	var out []string
	for _, ev := range r.res.Kueue.Quota.Events {
		if ev.At.Sub(time.Time{}) > now {
			break
		}
		_, name, _ := strings.Cut(ev.Key, "/")
		switch ev.Kind {
		case kueuereplay.Admitted:
			out = append(out, "admit "+name)
		case kueuereplay.Evicted:
			out = append(out, "evict "+name)
		}
	}
	return out
}

// TestKueueQuotaThenCapacityThenRunning: with both teams at their nominal
// quota and the cluster full, team-b's b2 waits for quota; the operator
// raises team-b's nominal quota (a patch as the tuner publishes it) and
// Kueue admits b2, whose pod then waits for GPUs until a node joins. The
// collector's timeline of b2 is the quota wait up to Kueue's QuotaReserved
// transition, then the scheduler's wait with the message it recorded, then
// running from where the pod was bound.
func TestKueueQuotaThenCapacityThenRunning(t *testing.T) {
	e := newEnv(t)
	db, stopCollecting := e.collect()
	e.gang("a1", "team-a", 2, nil)
	e.gang("b1", "team-b", 2, nil)
	e.waitRunning("a1", 2)
	e.waitRunning("b1", 2)
	e.nextSecond()
	e.gang("b2", "team-b", 1, nil)
	e.waitQuotaReserved("b2 pending for quota", "b2", metav1.ConditionFalse)
	e.nextSecond()
	patch := []byte(`{"spec":{"resourceGroups":[{"coveredResources":["cpu","nvidia.com/gpu"],"flavors":[{"name":"h100","resources":[` +
		`{"name":"cpu","nominalQuota":"256"},{"name":"nvidia.com/gpu","nominalQuota":"24","borrowingLimit":"16","lendingLimit":"16"}]}]}]}}`)
	cq := &kueueapi.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}
	if err := e.k.Client.Patch(t.Context(), cq, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	reserved := e.waitQuotaReserved("b2 admitted under team-b's raised quota", "b2", metav1.ConditionTrue)
	failed := e.waitFailedScheduling("b2")
	t.Logf("b2 admitted at %v; scheduler: %s", reserved.LastTransitionTime, failed.Message)
	e.nextSecond()
	if _, err := e.c.AddNodes(t.Context(), []trace.Node{{Name: "h04", GPUs: 8, GPUModel: "H100", CPUMilli: 128000, MemoryMiB: 1 << 20,
		Labels: map[string]string{trace.LabelSpine: "s1", trace.LabelRack: "r1", trace.LabelNVLinkDomain: "d3"}}},
		harness.NodeOptions{NoExporters: true, Heartbeat: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if nodes := e.waitRunning("b2", 1); nodes[0] != "h04" {
		t.Fatalf("b2 on %v, want the new node h04", nodes)
	}
	pods := e.pods("b2")
	if len(pods) != 1 {
		t.Fatalf("b2's pods: %v", pods)
	}
	bound := boundAt(pods)
	e.waitFor("the collector to see b2 running", func() bool {
		jobs, err := db.QueuedJobs(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return !slices.ContainsFunc(jobs, func(j store.QueuedJob) bool { return j.Name == "b2" })
	})
	stopCollecting()

	tl := timeline(t, db, "b2")
	var states []string
	for _, iv := range tl {
		t.Logf("b2 timeline: %s %s %s..%s %s", iv.State, iv.Category, iv.Start.Format("15:04:05.000"), iv.End.Format("15:04:05.000"), iv.Label)
		s := iv.State + "/" + iv.Category
		if len(states) == 0 || states[len(states)-1] != s {
			states = append(states, s)
		}
	}
	if len(tl) < 3 {
		t.Fatalf("b2's timeline %v: want quota, capacity, running", states)
	}
	if q := tl[0]; q.Category != string(schedloop.WaitQuota) || !q.End.Equal(reserved.LastTransitionTime.Time) ||
		!strings.HasPrefix(q.Label, "waiting for quota in ClusterQueue team-b") {
		t.Errorf("b2's first interval %+v: want waiting for quota in team-b until Kueue reserved it at %v", q, reserved.LastTransitionTime)
	}
	// After admission the wait is the scheduler's, as it recorded it: b2's
	// one member exists and finds no GPUs, a wait for capacity.
	capacity := slices.IndexFunc(tl, func(iv why.Interval) bool {
		return iv.State == "waiting" && iv.Category != string(schedloop.WaitQuota) && iv.Category != "not_attempted"
	})
	if capacity < 1 || tl[capacity].Start.Before(reserved.LastTransitionTime.Time) || tl[capacity].Message != failed.Message ||
		tl[capacity].Category != string(schedloop.WaitInsufficientGPU) {
		t.Errorf("b2's timeline %v: want the scheduler's wait for GPUs after its admission with its message %q", states, failed.Message)
	}
	if last := tl[len(tl)-1]; last.State != "running" || last.Start.Before(bound.Truncate(time.Second)) ||
		slices.ContainsFunc(tl[:len(tl)-1], func(iv why.Interval) bool { return iv.State == "running" }) {
		t.Errorf("b2's timeline %v: want it to end running from its binding at %v", states, bound)
	}
	if states[0] != "waiting/quota" || states[len(states)-1] != "running/" {
		t.Errorf("b2's states %v: want quota wait first, running last", states)
	}
}
