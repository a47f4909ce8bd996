package topology_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/schedplugins/topology"
)

// waitingHandle is a framework handle that knows only which pods wait at
// Permit.
type waitingHandle struct {
	fwk.Handle
	waiting map[types.UID]bool
}

func (h *waitingHandle) SharedInformerFactory() informers.SharedInformerFactory { return nil }

func (h *waitingHandle) GetWaitingPod(uid types.UID) fwk.WaitingPod {
	if h.waiting[uid] {
		return waitingPod{}
	}
	return nil
}

type waitingPod struct{ fwk.WaitingPod }

// The state a reservation is planned on changes with every change the plan
// reads, the ones that leave each node's generation as it was included: a
// pod-group cycle's trial member assumed in the snapshot (which keeps the
// node's generation, as Snapshot.AssumePod does) and taken back, and a
// gang member let go from Permit.
func TestPlanStateCoversWhatThePlanReads(t *testing.T) {
	h := &waitingHandle{waiting: map[types.UID]bool{"held": true}}
	p, err := topology.New(nil, h, nil, profilewatch.NewHolder(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n1, n2 := node("n1", gpuPod("running", "4"), gpuPod("held", "2")), node("n2")
	nodes := []fwk.NodeInfo{n1, n2}
	planned := p.PlanState(nodes)
	if p.PlanState([]fwk.NodeInfo{n2, n1}) != planned {
		t.Fatal("the state depends on the order the nodes are listed in")
	}

	gen := n2.Generation
	trial := gpuPod("trial", "8")
	n2.AddPod(trial)
	n2.Generation = gen
	if p.PlanState(nodes) == planned {
		t.Fatal("a trial member assumed on n2 at its generation left the state as planned")
	}
	if err := n2.RemovePod(klog.Background(), trial); err != nil {
		t.Fatal(err)
	}
	n2.Generation = gen
	if p.PlanState(nodes) != planned {
		t.Fatal("the trial taken back left the state changed")
	}

	h.waiting["held"] = false
	if p.PlanState(nodes) == planned {
		t.Fatal("a member let go from Permit left the state as planned")
	}
}
