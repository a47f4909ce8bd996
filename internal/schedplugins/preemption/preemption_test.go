package preemption

import (
	"testing"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
)

// A preemptor whose victims the cache still shows waits for them, as
// DefaultPreemption's does for victims it sees terminating: preempting
// again would find nothing left to evict and clear its nomination, so the
// node its victims free would not be held for it. Its pod object need not
// name the node yet. It may preempt again once the eviction failed, or
// once its filters turn that node down for good; another preemptor is not
// held back.
func TestPreemptorWaitsForItsVictims(t *testing.T) {
	ctx := t.Context()
	urgent := st.MakePod().Namespace("default").Name("urgent").UID("urgent").Priority(1000).Obj()
	other := st.MakePod().Namespace("default").Name("other").UID("other").Priority(1000).Obj()
	p := &Plugin{}
	if ok, msg := p.PodEligibleToPreemptOthers(ctx, urgent, nil); !ok {
		t.Fatalf("before any eviction: not eligible (%s)", msg)
	}
	p.markEvicted("train-0", &eviction{preemptor: urgent.UID, node: "w00"})
	p.markEvicted("train-1", &eviction{preemptor: urgent.UID, node: "w00"})
	if ok, _ := p.PodEligibleToPreemptOthers(ctx, urgent, nil); ok {
		t.Error("eligible while its victims are listed, want it to wait for them")
	}
	if ok, msg := p.PodEligibleToPreemptOthers(ctx, other, nil); !ok {
		t.Errorf("another preemptor: not eligible (%s)", msg)
	}

	statuses := framework.NewDefaultNodeToStatus()
	statuses.Set("w00", fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) had untolerated taint"))
	p.cycle = &view{statuses: statuses}
	if ok, msg := p.PodEligibleToPreemptOthers(ctx, urgent, nil); !ok {
		t.Errorf("its node turned down for good: not eligible (%s)", msg)
	}
	p.cycle = nil

	p.markEvicted("train-0", nil)
	p.markEvicted("train-1", nil)
	if ok, msg := p.PodEligibleToPreemptOthers(ctx, urgent, nil); !ok {
		t.Errorf("its evictions failed: not eligible (%s)", msg)
	}
}
