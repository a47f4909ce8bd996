package queue

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/reasons"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
)

const profileYAML = `apiVersion: schedloop.io/v1
kind: SchedulingProfile
name: limits
weights: {topology: 10, fragmentation: 5, bestfit: 2}
queues:
  research: {maxGPUs: 8, maxRunningGangs: 1}
`

func queuePod(name, queue, group, gpus string) *v1.Pod {
	w := st.MakePod().Namespace("default").Name(name).UID(name).
		Res(map[v1.ResourceName]string{v1.ResourceCPU: "1", podspec.ResourceGPU: gpus})
	if queue != "" {
		w = w.Label(podspec.LabelQueue, queue)
	}
	if group != "" {
		w = w.Label(podgroup.LabelPodGroup, group)
	}
	return w.Obj()
}

// holding is the plugin under profileYAML with research already running
// held, admitted and reserved.
func holding(t *testing.T, held *v1.Pod) *Queue {
	t.Helper()
	holder := profilewatch.NewHolder()
	if _, err := holder.Apply([]byte(profileYAML)); err != nil {
		t.Fatal(err)
	}
	q, err := New(nil, nil, holder, nil)
	if err != nil {
		t.Fatal(err)
	}
	state := framework.NewCycleState()
	if _, s := q.PreFilter(context.Background(), state, held, nil); !s.IsSuccess() {
		t.Fatalf("%s: %v", held.Name, s)
	}
	q.Reserve(context.Background(), state, held, "n1")
	return q
}

func TestPreFilter(t *testing.T) {
	// research already runs one gang holding 4 GPUs.
	q := holding(t, queuePod("held", "research", "g0", "4"))

	tests := []struct {
		pod    *v1.Pod
		code   fwk.Code
		reason string
	}{
		{queuePod("free", "", "", "8"), fwk.Skip, ""},
		{queuePod("other", "batch", "", "64"), fwk.Success, ""},
		{queuePod("fits", "research", "", "4"), fwk.Success, ""},
		{queuePod("same-gang", "research", "g0", "4"), fwk.Success, ""},
		{queuePod("too-big", "research", "", "5"), fwk.UnschedulableAndUnresolvable, reasons.QueueAtLimit("research", 8)},
		{queuePod("second-gang", "research", "g1", "1"), fwk.UnschedulableAndUnresolvable, reasons.QueueAtGangLimit("research", 1)},
	}
	for _, tc := range tests {
		t.Run(tc.pod.Name, func(t *testing.T) {
			_, s := q.PreFilter(context.Background(), framework.NewCycleState(), tc.pod, nil)
			if s.Code() != tc.code || s.Message() != tc.reason {
				t.Errorf("PreFilter = %v %q, want %v %q", s.Code(), s.Message(), tc.code, tc.reason)
			}
		})
	}
}

// The plugin admits what the simulator admits: a 0 limit is no limit, and
// GPU shares count their share, so a 1-GPU queue holds four quarter-GPU
// pods and turns the fifth away.
func TestPreFilterCountsSharesAndZeroLimits(t *testing.T) {
	holder := profilewatch.NewHolder()
	if _, err := holder.Apply([]byte(`apiVersion: schedloop.io/v1
kind: SchedulingProfile
name: shares
weights: {topology: 10}
queues:
  shared: {maxGPUs: 1}
  open: {maxGPUs: 0}
`)); err != nil {
		t.Fatal(err)
	}
	q, err := New(nil, nil, holder, nil)
	if err != nil {
		t.Fatal(err)
	}
	quarter := func(name string) *v1.Pod {
		return st.MakePod().Namespace("default").Name(name).UID(name).Label(podspec.LabelQueue, "shared").
			Res(map[v1.ResourceName]string{v1.ResourceCPU: "1", podspec.ResourceGPUMilli: "250"}).Obj()
	}
	for i := range 4 {
		pod := quarter(fmt.Sprintf("q%d", i))
		state := framework.NewCycleState()
		if _, s := q.PreFilter(context.Background(), state, pod, nil); !s.IsSuccess() {
			t.Fatalf("quarter GPU %d of 4 in a 1-GPU queue: %v", i+1, s)
		}
		q.Reserve(context.Background(), state, pod, "n1")
	}
	if _, s := q.PreFilter(context.Background(), framework.NewCycleState(), quarter("q4"), nil); s.Code() != fwk.UnschedulableAndUnresolvable ||
		s.Message() != reasons.QueueAtLimit("shared", 1) {
		t.Errorf("fifth quarter GPU: %v, want %q", s, reasons.QueueAtLimit("shared", 1))
	}
	for _, pod := range []*v1.Pod{queuePod("big", "open", "", "64"), queuePod("gang", "open", "g", "8")} {
		if _, s := q.PreFilter(context.Background(), framework.NewCycleState(), pod, nil); !s.IsSuccess() {
			t.Errorf("%s in a queue with maxGPUs 0 (no limit): %v", pod.Name, s)
		}
	}
}

// The hint of a deleted assigned pod frees its queue's share before the
// woken pods are tried, whatever the ledger's informer has seen.
func TestDeleteHintFreesTheShare(t *testing.T) {
	held := queuePod("held", "research", "", "4")
	q := holding(t, held)
	waiting := queuePod("waiting", "research", "", "5")
	if _, s := q.PreFilter(context.Background(), framework.NewCycleState(), waiting, nil); s.IsSuccess() {
		t.Fatal("5 GPUs admitted beside 4 under a limit of 8")
	}
	events, err := q.EventsToRegister(context.Background())
	if err != nil || len(events) != 1 || events[0].QueueingHintFn == nil {
		t.Fatalf("events %v, %v: want one with a hint", events, err)
	}
	if h, err := events[0].QueueingHintFn(klog.Background(), waiting, held, nil); err != nil || h != fwk.Queue {
		t.Fatalf("hint = %v, %v; want Queue", h, err)
	}
	if _, s := q.PreFilter(context.Background(), framework.NewCycleState(), waiting, nil); !s.IsSuccess() {
		t.Fatalf("after the holder's delete: %v", s)
	}
}
