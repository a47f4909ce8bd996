package queuesort_test

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/schedloop/schedloop/internal/podgroup"
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
			order, err := queuesort.NewOrder(nil)
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
	order, err := queuesort.NewOrder(factory.Core().V1().Pods().Informer())
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
