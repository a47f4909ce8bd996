package events

import (
	"strings"

	"github.com/schedloop/schedloop"
)

// Kueue keeps a Workload's admission state in its status conditions rather
// than in Events alone: QuotaReserved and Admitted say False with a reason
// while the workload waits, Evicted and Preempted say True with a reason when
// it is sent back. The condition types and reasons are constants of
// kubernetes-sigs/kueue apis/kueue/v1beta2/workload_types.go; the messages are
// those parseOtherScheduler reads from Events (flavorassigner.go and
// scheduler.go write the same text into QuotaReserved's message).
const (
	KueueQuotaReserved = "QuotaReserved"
	KueueAdmitted      = "Admitted"
	KueueEvicted       = "Evicted"
	KueuePreempted     = "Preempted"
)

// kueueWaitReasons maps the reason of a QuotaReserved=False or
// Admitted=False condition to the wait it stands for. A reason not listed
// leaves the condition under other. "Pending" is the reason releases before
// v0.14 wrote for every quota wait.
var kueueWaitReasons = map[string]schedloop.WaitCategory{
	"WaitingForQuota":              schedloop.WaitQuota,
	"ExceedsMaxQuota":              schedloop.WaitQuota,
	"NoMatchingFlavor":             schedloop.WaitQuota,
	"WaitingForPreemptedWorkloads": schedloop.WaitQuota,
	"Pending":                      schedloop.WaitQuota,
	"NoReservation":                schedloop.WaitQuota,
	// Kueue's own topology-aware placement found no domain for the pod set.
	"TopologyPlacementFailed": schedloop.WaitTopology,
}

// kueueEvictReasons maps the reason of an Evicted=True or Preempted=True
// condition. A workload evicted because its queue was stopped or it was
// deactivated waits on Kueue's admission again; one preempted waits for
// the capacity it lost. PodsReadyTimeout, NodeFailures and the rest stay
// other: nothing in the cluster's queues or quota explains them.
var kueueEvictReasons = map[string]schedloop.WaitCategory{
	"Preempted":                     schedloop.WaitPreemption,
	"InClusterQueue":                schedloop.WaitPreemption,
	"InCohortReclamation":           schedloop.WaitPreemption,
	"InCohortFairSharing":           schedloop.WaitPreemption,
	"InCohortReclaimWhileBorrowing": schedloop.WaitPreemption,
	"ClusterQueueStopped":           schedloop.WaitQuota,
	"LocalQueueStopped":             schedloop.WaitQuota,
	"InactiveWorkload":              schedloop.WaitQuota,
	"Deactivated":                   schedloop.WaitQuota,
}

// ParseWorkloadCondition files one Kueue Workload condition. waiting is
// false for a condition that says nothing about a wait (QuotaReserved=True,
// Admitted=True, Evicted=False, any other type); the returned value is then
// zero but for its Message. A waiting condition whose reason is not known is
// filed under other with Parsed false, never an error.
//
// The message refines the reason where it can: QuotaReserved=False's message
// names the resources and flavors short of quota, and those become the
// reasons counted.
func ParseWorkloadCondition(condType, status, reason, message string) (f FailedScheduling, waiting bool) {
	f = FailedScheduling{Category: schedloop.WaitOther, Message: message}
	var table map[string]schedloop.WaitCategory
	switch {
	case (condType == KueueQuotaReserved || condType == KueueAdmitted) && status == "False":
		table = kueueWaitReasons
	case (condType == KueueEvicted || condType == KueuePreempted) && status == "True":
		table = kueueEvictReasons
	default:
		return f, false
	}
	c, known := table[reason]
	if o, ok := parseOtherScheduler(message); ok && o.Category != schedloop.WaitOther &&
		(!known || o.Category == c) {
		o.Message = message
		return o, true
	}
	if !known {
		if reason != "" {
			f.Reasons = map[string]int{condType + ": " + reason: 0}
		}
		return f, true
	}
	f.Reasons = map[string]int{condType + ": " + reason: 0}
	if m := strings.TrimSuffix(strings.TrimSpace(message), "."); m != "" {
		f.Reasons = map[string]int{m: 0}
	}
	f.Parsed, f.Category = true, c
	return f, true
}

// ParseWorkloadCondition is the package function that also counts a waiting
// condition it could not file under a specific category.
func (p *Parser) ParseWorkloadCondition(condType, status, reason, message string) (FailedScheduling, bool) {
	f, waiting := ParseWorkloadCondition(condType, status, reason, message)
	if waiting && !f.Parsed {
		p.unparsed.Inc()
	}
	return f, waiting
}
