package nodeview_test

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/schedloop/schedloop/internal/schedplugins/nodeview"
)

func gpuNode(name string) *framework.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(st.MakeNode().Name(name).Label("rack", "r1").Capacity(map[v1.ResourceName]string{
		v1.ResourceCPU: "64", v1.ResourceMemory: "256Gi", nodeview.ResourceGPU: "8"}).Obj())
	return ni
}

func TestCacheRebuildsOnlyChangedNodes(t *testing.T) {
	c := nodeview.NewCache([]string{"rack"})
	a, b := gpuNode("a"), gpuNode("b")
	first := c.Nodes([]fwk.NodeInfo{a, b})
	b.AddPod(st.MakePod().Name("p").UID("p").Res(map[v1.ResourceName]string{nodeview.ResourceGPU: "3"}).Obj())
	second := c.Nodes([]fwk.NodeInfo{a, b})
	if second[0] != first[0] {
		t.Error("unchanged node a was rebuilt")
	}
	if second[1] == first[1] {
		t.Fatal("node b changed but its view was reused")
	}
	if got, want := second[1].IdleGPUs(), 5; got != want {
		t.Errorf("b idle GPUs = %d, want %d", got, want)
	}
	if got := fmt.Sprint(second[1].Domains); got != "[r1]" {
		t.Errorf("b domains = %s, want [r1]", got)
	}
	if fmt.Sprint(*nodeview.Node(a, []string{"rack"})) != fmt.Sprint(*second[0]) {
		t.Error("cached view differs from a fresh one")
	}
}

func TestCacheDropsRemovedNodes(t *testing.T) {
	c := nodeview.NewCache(nil)
	var many []fwk.NodeInfo
	for i := range 200 {
		many = append(many, gpuNode(fmt.Sprintf("n%03d", i)))
	}
	c.Nodes(many)
	c.Nodes(many[:10])
	if got := c.Len(); got > 10 {
		t.Errorf("cache holds %d views after the cluster shrank to 10 nodes", got)
	}
}
