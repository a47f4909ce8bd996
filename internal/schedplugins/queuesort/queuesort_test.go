package queuesort_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/schedplugins/queuesort"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func queued(t *testing.T, pod *v1.Pod, at int) *framework.QueuedPodInfo {
	t.Helper()
	pi, err := framework.NewPodInfo(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &framework.QueuedPodInfo{PodInfo: pi, QueueingParams: framework.QueueingParams{Timestamp: t0.Add(time.Duration(at) * time.Second)}}
}

func pod(name, group string, priority int32) *v1.Pod {
	w := st.MakePod().Namespace("default").Name(name).UID(name).Priority(priority)
	if group != "" {
		w = w.Label(podgroup.LabelPodGroup, group)
	}
	return w.Obj()
}

func TestLessKeepsGangsTogether(t *testing.T) {
	tests := []struct {
		name string
		// pods in arrival order (arrival i at second i)
		pods []*v1.Pod
		want []string
	}{
		{"single pods keep arrival order", []*v1.Pod{pod("a", "", 0), pod("b", "", 0), pod("c", "", 0)}, []string{"a", "b", "c"}},
		{"higher priority first", []*v1.Pod{pod("a", "", 0), pod("b", "", 10)}, []string{"b", "a"}},
		{"a gang's members follow its first arrival",
			[]*v1.Pod{pod("g-0", "g", 0), pod("x", "", 0), pod("h-0", "h", 0), pod("g-1", "g", 0), pod("y", "", 0), pod("h-1", "h", 0)},
			[]string{"g-0", "g-1", "x", "h-0", "h-1", "y"}},
		{"priority still comes first", []*v1.Pod{pod("g-0", "g", 0), pod("x", "", 5), pod("g-1", "g", 0)}, []string{"x", "g-0", "g-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			order, err := queuesort.NewOrder(nil, queuesort.Options{})
			if err != nil {
				t.Fatal(err)
			}
			p, _ := queuesort.New(nil, order)
			var q []fwk.QueuedEntityInfo
			for i, pd := range tc.pods {
				q = append(q, queued(t, pd, i))
				// The queue compares entities as they arrive.
				p.Less(q[len(q)-1], q[0])
			}
			sort.SliceStable(q, func(i, j int) bool { return p.Less(q[i], q[j]) })
			var got []string
			for _, e := range q {
				got = append(got, e.(*framework.QueuedPodInfo).GetPod().Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("order = %v, want %v", got, tc.want)
			}
		})
	}
}

// The order forgets a gang once none of its members waits to be placed.
func TestOrderForgetsPlacedGangs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pods := []*v1.Pod{pod("g-0", "g", 0), pod("g-1", "g", 0)}
	client := fake.NewClientset(pods[0], pods[1])
	factory := informers.NewSharedInformerFactory(client, 0)
	order, err := queuesort.NewOrder(factory.Core().V1().Pods().Informer(), queuesort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	order.Less(queued(t, pods[0], 0), queued(t, pods[1], 1))
	if order.Len() != 1 {
		t.Fatalf("gangs remembered = %d, want 1", order.Len())
	}
	for _, pd := range pods {
		bound := pd.DeepCopy()
		bound.Spec.NodeName = "n1"
		if _, err := client.CoreV1().Pods("default").Update(ctx, bound, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return order.Len() == 0, nil
	}); err != nil {
		t.Fatalf("gangs remembered = %d after every member bound, want 0", order.Len())
	}
}

// holder is a profile holder with doc active and a predictor table whose
// jobs named by key ("namespace/name" normalised) run for the given
// seconds.
func holder(t *testing.T, doc string, runs map[string]float64) *profilewatch.Holder {
	t.Helper()
	tb := predict.Table{HalfLifeSeconds: 3600, MinSamples: 1, MaxEntries: 1000, DefaultSeconds: 3600}
	for name, sec := range runs {
		// The level keyed by queue (none here), normalised name and GPUs,
		// as JobFeatures keys it.
		ns, job, _ := strings.Cut(name, "/")
		tb.Entries = append(tb.Entries, predict.TableEntry{Level: "namespace/queue/name/gpus", Key: ns + "//" + job + "/1", Seconds: sec, Weight: 1, Samples: 1})
	}
	b, err := json.Marshal(tb)
	if err != nil {
		t.Fatal(err)
	}
	h := profilewatch.NewHolder()
	if _, err := h.ApplyWithTable([]byte(doc), b); err != nil {
		t.Fatal(err)
	}
	return h
}

func gpuPod(name string, priority int32, queue string) *v1.Pod {
	w := st.MakePod().Namespace("default").Name(name).UID(name).Priority(priority).
		Req(map[v1.ResourceName]string{"nvidia.com/gpu": "1"})
	if queue != "" {
		w = w.Label("kueue.x-k8s.io/queue-name", queue)
	}
	return w.Obj()
}

func sorted(t *testing.T, order *queuesort.Order, pods []*v1.Pod) []string {
	t.Helper()
	p, _ := queuesort.New(nil, order)
	var q []fwk.QueuedEntityInfo
	for i, pd := range pods {
		q = append(q, queued(t, pd, i))
	}
	sort.SliceStable(q, func(i, j int) bool { return p.Less(q[i], q[j]) })
	var got []string
	for _, e := range q {
		got = append(got, e.(*framework.QueuedPodInfo).GetPod().Name)
	}
	return got
}

const policyDoc = "apiVersion: schedloop.io/v1\nkind: SchedulingProfile\nname: p\nweights: {bestfit: 1}\n"

// The order policy of the profile orders pods by what the published
// predictor table predicts for them, and the starvation bound lifts a pod
// that has waited past it, as the simulator orders jobs.
func TestLessAppliesTheOrderPolicy(t *testing.T) {
	runs := map[string]float64{"default/long": 36000, "default/mid": 3600, "default/short": 60}
	pods := func() []*v1.Pod {
		return []*v1.Pod{gpuPod("long", 0, ""), gpuPod("mid", 0, ""), gpuPod("short", 0, ""), gpuPod("urgent", 5, "")}
	}
	now := t0.Add(10 * time.Second)
	tests := []struct {
		doc  string
		want []string
	}{
		{policyDoc, []string{"urgent", "long", "mid", "short"}},
		{policyDoc + "order: shortest-service\n", []string{"urgent", "short", "mid", "long"}},
		// long arrived at 0 s, mid at 1 s: both waited past 8.5 s at 10 s;
		// short (2 s) did not.
		{policyDoc + "order: shortest-service\nstarvationBoundSeconds: 8\n", []string{"urgent", "long", "mid", "short"}},
	}
	for _, tc := range tests {
		order, err := queuesort.NewOrder(nil, queuesort.Options{Profile: holder(t, tc.doc, runs), Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		if got := sorted(t, order, pods()); !slices.Equal(got, tc.want) {
			t.Errorf("%q: order = %v, want %v", tc.doc, got, tc.want)
		}
	}
}

// Fair share puts first the pods of the queue whose bound pods received
// the least GPU time lately, whatever their arrival.
func TestLessFairShareFollowsBoundPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running := gpuPod("busy-0", 0, "busy")
	running.Spec.NodeName = "n1"
	client := fake.NewClientset(running)
	factory := informers.NewSharedInformerFactory(client, 0)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	order, err := queuesort.NewOrder(factory.Core().V1().Pods().Informer(), queuesort.Options{
		Profile: holder(t, policyDoc+"order: fair-share\n", nil), Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return order.Charged() == 1, nil
	}); err != nil {
		t.Fatal("the bound pod was never charged to its queue")
	}
	now.Store(t0.Add(time.Hour).UnixNano())
	// One GPU for an hour under an 8 h half-life: ∫ e^(-λ(1h-s)) ds.
	lambda := math.Ln2 / (8 * 3600)
	want := (1 - math.Exp(-lambda*3600)) / lambda
	if a := order.Attained("busy"); math.Abs(a-want) > 1 {
		t.Fatalf("queue busy attained %v GPU-seconds after one GPU ran an hour, want %v", a, want)
	}
	pods := []*v1.Pod{gpuPod("b", 0, "busy"), gpuPod("i", 0, "idle")}
	if got := sorted(t, order, pods); !slices.Equal(got, []string{"i", "b"}) {
		t.Errorf("fair-share order = %v, want the idle queue first", got)
	}
}

// With GenericWorkload on, the scheduler queues a Workload API gang as one
// pod-group entity. It is keyed as its members are: under shortest-service
// a long gang's entity waits behind a shorter lone pod that arrived after
// it, and a short one goes ahead of both, as scoring.CompareOrder orders
// the jobs.
func TestLessKeysPodGroupEntitiesAsTheirMembers(t *testing.T) {
	runs := map[string]float64{"default/long": 36000, "default/mid": 3600, "default/short": 60}
	member := func(name, group string) *v1.Pod {
		p := gpuPod(name, 0, "")
		p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &group}
		return p
	}
	group := func(name string, at int) fwk.QueuedEntityInfo {
		// A one-member gang: the table is keyed by the job's GPUs (1).
		return &framework.QueuedPodGroupInfo{
			PodGroupInfo:   &framework.PodGroupInfo{Namespace: "default", Name: name, PodGroup: &schedulingv1beta1.PodGroup{}, UnscheduledPods: []*v1.Pod{member(name+"-0", name)}},
			QueueingParams: framework.QueueingParams{Timestamp: t0.Add(time.Duration(at) * time.Second)},
		}
	}
	order, err := queuesort.NewOrder(nil, queuesort.Options{Profile: holder(t, policyDoc+"order: shortest-service\n", runs),
		Now: func() time.Time { return t0.Add(10 * time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := queuesort.New(nil, order)
	q := []fwk.QueuedEntityInfo{group("long", 0), queued(t, gpuPod("mid", 0, ""), 1), group("short", 2)}
	sort.SliceStable(q, func(i, j int) bool { return p.Less(q[i], q[j]) })
	var got []string
	for _, e := range q {
		switch x := e.(type) {
		case *framework.QueuedPodInfo:
			got = append(got, x.GetPod().Name)
		case *framework.QueuedPodGroupInfo:
			got = append(got, x.GetName())
		}
	}
	if want := []string{"short", "mid", "long"}; !slices.Equal(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
}

// A Workload API gang that arrived to an empty queue is keyed only when
// the queue first compares it with another entity, after its attempts may
// have moved its queue timestamp: it is keyed by when it first entered the
// queue, ahead of a gang that arrived after it.
func TestLessKeysAnEntityByItsFirstQueueing(t *testing.T) {
	group := func(name string, first, latest int) fwk.QueuedEntityInfo {
		member := pod(name+"-0", "", 0)
		member.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &name}
		initial := t0.Add(time.Duration(first) * time.Second)
		return &framework.QueuedPodGroupInfo{
			PodGroupInfo: &framework.PodGroupInfo{Namespace: "default", Name: name, PodGroup: &schedulingv1beta1.PodGroup{}, UnscheduledPods: []*v1.Pod{member}},
			QueueingParams: framework.QueueingParams{Timestamp: t0.Add(time.Duration(latest) * time.Second),
				InitialAttemptTimestamp: &initial},
		}
	}
	order, err := queuesort.NewOrder(nil, queuesort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := queuesort.New(nil, order)
	// "early" entered the queue at 0 s and was last requeued at 30 s;
	// "late" entered it at 10 s and was last requeued at 20 s.
	early, late := group("early", 0, 30), group("late", 10, 20)
	if !p.Less(early, late) || p.Less(late, early) {
		t.Error("the gang that entered the queue first is not ordered first")
	}
}

// BenchmarkLess sorts a queue of 1,000 waiting pods (a quarter in gangs of
// four, four queues) under fair share, the order whose keys read the most,
// as the scheduler's heap compares them: every comparison keys both pods.
func BenchmarkLess(b *testing.B) {
	order, err := queuesort.NewOrder(nil, queuesort.Options{Profile: holder(&testing.T{}, policyDoc+"order: fair-share\n", nil)})
	if err != nil {
		b.Fatal(err)
	}
	p, _ := queuesort.New(nil, order)
	var q []fwk.QueuedEntityInfo
	for i := range 1000 {
		pd := gpuPod(fmt.Sprintf("p-%04d", i), int32(i%3), fmt.Sprintf("q%d", i%4))
		if i%4 == 0 {
			pd.Labels[podgroup.LabelPodGroup] = fmt.Sprintf("g-%d", i/16)
		}
		pi, err := framework.NewPodInfo(pd)
		if err != nil {
			b.Fatal(err)
		}
		q = append(q, &framework.QueuedPodInfo{PodInfo: pi, QueueingParams: framework.QueueingParams{Timestamp: t0.Add(time.Duration(i) * time.Second)}})
	}
	b.ResetTimer()
	for range b.N {
		s := slices.Clone(q)
		sort.Slice(s, func(i, j int) bool { return p.Less(s[i], s[j]) })
	}
}
