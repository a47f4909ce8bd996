package topology

import fwk "k8s.io/kube-scheduler/framework"

// PlanState is planState, for the external tests.
func (t *Topology) PlanState(nis []fwk.NodeInfo) uint64 { return t.planState(nis) }
