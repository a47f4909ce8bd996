package events

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/schedloop/schedloop"
)

// Waiting messages of schedulers other than kube-scheduler, and of Kueue in
// front of any of them. Each shape is cited to the source that writes it;
// testdata/schedulers.txt holds real texts of each. A cluster running Volcano,
// KAI or YuniKorn, or Kueue in front of kube-scheduler, gets its waits filed
// under the same categories as kube-scheduler's and schedloop's own.

var (
	// volcano-sh/volcano pkg/scheduler/framework/session.go and
	// pkg/scheduler/cache/cache.go (RecordJobStatusEvent):
	// "%v/%v tasks in gang unschedulable: %v", the last part being
	// JobInfo.FitError() (pkg/scheduler/api/job_info.go).
	volcanoGangRE = regexp.MustCompile(`^(\d+)/(\d+) tasks in gang unschedulable: (.*)$`)
	// JobInfo.FitError appends the first failed task's own fit error.
	volcanoOriginRE = regexp.MustCompile(`\. Origin reason is [^:]*: (.*)$`)
	// JobInfo.TaskSchedulingReason for a task that fits while its gang does not.
	volcanoPossiblyRE = regexp.MustCompile(`^Pod \S+ can possibly be assigned to \S+`)
	// HyperNode (network-topology-aware) scheduling's fit summary, which
	// JobInfo.SetHyperNodeFitErrors writes into the job's fit error
	// (pkg/scheduler/actions/allocate/allocate.go; format in
	// docs/design/group-topology-affinity.md): "HyperNode: <eligible>/<total>
	// hyperNodes available [(minResource: ...)]:\n<tier> <e>/<t> (<n>
	// <excluded by>, ...); ...", then "Node: <task>: In hyperNode <name>:
	// <fit error>" for the nodes of the hyperNodes tried.
	volcanoHyperNodeRE       = regexp.MustCompile(`HyperNode: (\d+)/(\d+) hyperNodes available`)
	volcanoHyperNodeTierRE   = regexp.MustCompile(`(?m)(?:^|; )\S+ \d+/\d+ \(([^)]*)\)`)
	volcanoHyperNodeNodeRE   = regexp.MustCompile(`In hyperNode \S+: (0/\d+ nodes are (?:un)?available: [^\n]*)`)
	volcanoHyperNodeReasonRE = regexp.MustCompile(`^(\d+) (\S+)$`)

	// apache/yunikorn-core pkg/scheduler/objects/events/ask_events.go.
	yunikornQueueRE     = regexp.MustCompile(`^Request '[^']*' does not fit in queue '([^']*)'`)
	yunikornUserRE      = regexp.MustCompile(`^Request '[^']*' exceeds the available user quota`)
	yunikornPredicateRE = regexp.MustCompile(`^Unschedulable request '[^']*': (.*)$`)
	yunikornCountRE     = regexp.MustCompile(`^(.*) \((\d+)x\)$`)

	// kubernetes-sigs/kueue pkg/scheduler/flavorassigner/flavorassigner.go
	// (Assignment.Message, the quota checks) and pkg/scheduler/scheduler.go.
	kueueQuotaRE = regexp.MustCompile(`insufficient (?:unused )?quota for (\S+) in flavor ([^,.\s]+)`)
	// pkg/controller/core/workload_controller.go and pkg/scheduler/scheduler.go.
	kueueQueueStateRE = regexp.MustCompile(`^(?:ClusterQueue|LocalQueue) \S+ (?:is inactive|is stopped|doesn't exist|not found|is terminating or missing)$`)
	// flavorassigner.go's reasons for a flavour the pod set cannot use at
	// all: its nodes' taints or labels rule the pods out.
	kueueFlavorMismatchRE = regexp.MustCompile(`(?:untolerated taint \{[^}]*\} in flavor ([^,.\s]+)|flavor ([^,.\s]+) doesn't match node affinity)`)
	kueuePreemptedRE      = regexp.MustCompile(`^Preempted to accommodate a (?:workload|higher priority Workload)`)
)

// KAI's messages (kai-scheduler/KAI-Scheduler pkg/scheduler/api/common_info/
// pod_errors.go and job_errors.go) join reasons with ". \n".
const (
	kaiNoNodes       = "no nodes with enough resources were found"
	kaiNotEnough     = "Not enough resources for the workload"
	kaiUnable        = "Unable to schedule podgroup"
	kaiPodPrefix     = "PodSchedulingErrors."
	kaiResourcesFor  = "Resources were not found for pod "
	kaiSeparator     = ". \n"
	volcanoAllNodes  = "all nodes are unavailable"
	volcanoNotReady  = "pod group is not ready"
	volcanoQueue     = "queue resource quota insufficient"
	kueueFlavors     = "couldn't assign flavors to pod set "
	kueueFlavorsErr  = "failed to assign flavors to pod set "
	kueueNoLongerFit = "Workload no longer fits after processing another workload"
	kueueGateCleared = "AdmissionGatedBy cleared, waiting for quota reservation"
	// pkg/controller/core/workload_controller.go (admission gated, pending
	// evaluation, a stopped LocalQueue's eviction) and
	// pkg/workload/admissionchecks.go (Admitted=False while quota or admission
	// checks are missing): the workload waits in Kueue, not at a scheduler.
	kueueGatedBy = "Admission is gated by: "
)

// kueueWaiting are whole Kueue condition messages that say the workload
// waits for Kueue's admission.
var kueueWaiting = []string{
	kueueNoLongerFit,
	kueueGateCleared,
	"Workload is pending evaluation in the scheduling queue",
	"The workload has no reservation",
	"The workload has no reservation and not all checks ready",
	"The workload has not all checks ready",
	"The LocalQueue is stopped",
}

// parseOtherScheduler reads the shapes above. ok is false for text none of
// them knows; the caller then keeps it under other. It never fails.
func parseOtherScheduler(text string) (FailedScheduling, bool) {
	f := FailedScheduling{Category: schedloop.WaitOther}
	text = strings.TrimSpace(text)
	switch {
	case volcanoHyperNodeRE.MatchString(text):
		return parseVolcanoHyperNodes(text), true
	case volcanoGangRE.MatchString(text):
		return parseVolcanoJob(volcanoGangRE.FindStringSubmatch(text)[3])
	case strings.HasPrefix(text, volcanoNotReady):
		return parseVolcanoJob(text)
	case volcanoPossiblyRE.MatchString(text):
		return one(f, "can possibly be assigned once minAvailable is satisfied", schedloop.WaitGangIncomplete), true
	case strings.HasPrefix(text, volcanoQueue):
		return one(f, strings.TrimSuffix(text, "."), schedloop.WaitQueueLimit), true
	case strings.HasPrefix(text, volcanoAllNodes+":"):
		if _, counts, ok := parseNodeList("0/0 nodes are available:" + text[len(volcanoAllNodes)+1:]); ok {
			f.Reasons, f.Parsed = counts, true
			f.Category = primaryCategory(counts)
			return f, true
		}
		return f, false

	case strings.HasPrefix(text, kaiPodPrefix):
		return parseOtherScheduler(strings.TrimPrefix(text, kaiPodPrefix))
	case strings.HasPrefix(text, kaiResourcesFor):
		if i := strings.Index(text, " due to: "); i >= 0 {
			return parseOtherScheduler(text[i+len(" due to: "):])
		}
		return f, false
	case strings.HasPrefix(text, kaiNoNodes):
		return parseKAIList(text[len(kaiNoNodes):], schedloop.WaitInsufficientCPU), true
	case strings.HasPrefix(text, kaiNotEnough):
		return parseKAIList(text[len(kaiNotEnough):], schedloop.WaitInsufficientCPU), true
	case strings.HasPrefix(text, kaiUnable):
		return parseKAIList(text[len(kaiUnable):], schedloop.WaitOther), true

	case yunikornQueueRE.MatchString(text):
		q := yunikornQueueRE.FindStringSubmatch(text)[1]
		return one(f, "does not fit in queue "+q, schedloop.WaitQueueLimit), true
	case yunikornUserRE.MatchString(text):
		return one(f, "exceeds the available user quota", schedloop.WaitQueueLimit), true
	case yunikornPredicateRE.MatchString(text):
		return parseYuniKornPredicates(yunikornPredicateRE.FindStringSubmatch(text)[1])

	case strings.HasPrefix(text, kueueFlavors), strings.HasPrefix(text, kueueFlavorsErr):
		return parseKueueFlavors(text), true
	case slices.Contains(kueueWaiting, text), strings.HasPrefix(text, kueueGatedBy), kueueQueueStateRE.MatchString(text),
		strings.HasPrefix(text, "resource ") && strings.HasSuffix(text, " unavailable in ClusterQueue"):
		return one(f, text, schedloop.WaitQuota), true
	case kueuePreemptedRE.MatchString(text):
		return one(f, "preempted by Kueue", schedloop.WaitPreemption), true
	}
	return f, false
}

// parseKueueFlavors reads Assignment.Message: the pod set's reasons, one
// per flavour tried. Quota short in some flavour is a wait for quota. A pod
// set every flavour of which its taints or node labels rule out waits for
// no quota: nothing changes for it until its tolerations or selectors, or
// the flavours, do, so it is filed as taints/affinity. Other text (a
// resource the ClusterQueue does not cover) stays a wait for Kueue.
func parseKueueFlavors(text string) FailedScheduling {
	f := FailedScheduling{Category: schedloop.WaitQuota, Parsed: true, Reasons: map[string]int{}}
	for _, m := range kueueQuotaRE.FindAllStringSubmatch(text, -1) {
		f.Reasons["insufficient quota for "+m[1]+" in flavor "+m[2]] = 0
	}
	if len(f.Reasons) > 0 {
		return f
	}
	for _, m := range kueueFlavorMismatchRE.FindAllStringSubmatch(text, -1) {
		f.Reasons["flavor "+m[1]+m[2]+" does not admit the pods' tolerations or node affinity"] = 0
	}
	if len(f.Reasons) > 0 {
		f.Category = schedloop.WaitTaintAffinity
		return f
	}
	f.Reasons[strings.TrimSuffix(text, ".")] = 0
	return f
}

// one files text as a single reason that applies to the whole pod.
func one(f FailedScheduling, reason string, c schedloop.WaitCategory) FailedScheduling {
	f.Reasons = map[string]int{reason: 0}
	f.Parsed, f.Category = true, c
	return f
}

// parseVolcanoJob reads JobInfo.FitError: "pod group is not ready, <counts>,
// <n> minAvailable[; Pending: ...][. Origin reason is <task>: <fit error>]".
// The gang waits because its members do not fit; when the origin reason says
// why (GPUs short, a queue full), that is the category, since it is what
// would have to change. Without it the wait is the gang's.
func parseVolcanoJob(s string) (FailedScheduling, bool) {
	f := FailedScheduling{Category: schedloop.WaitGangIncomplete, Parsed: true}
	head := s
	if m := volcanoOriginRE.FindStringSubmatchIndex(s); m != nil {
		head = s[:m[0]]
		if inner := ParseFailedScheduling(s[m[2]:m[3]]); inner.Parsed && inner.Category != schedloop.WaitOther {
			inner.Reasons[volcanoNotReady] = 0
			return inner, true
		}
	}
	if !strings.HasPrefix(head, volcanoNotReady) {
		// A gang message around a FitError of another shape: a queue or
		// per-node reason from a plugin.
		if inner := ParseFailedScheduling(head); inner.Parsed {
			return inner, true
		}
		if c := categorize(strings.TrimSuffix(head, ".")); c != schedloop.WaitOther {
			return one(f, strings.TrimSuffix(head, "."), c), true
		}
	}
	f.Reasons = map[string]int{volcanoNotReady: 0}
	return f, true
}

// parseVolcanoHyperNodes reads the HyperNode fit summary, alone or inside
// a gang's fit error. The job waits for a topology domain that holds it:
// either none is allowed (its network topology or group anti-affinity
// excluded them, or their free capacity is below the job's minimum) or the
// nodes of those allowed lack room; both are filed under topology, as KAI's
// node-group shortages are. The reasons keep how many hyperNodes each
// constraint excluded and the node reasons inside the hyperNodes tried.
func parseVolcanoHyperNodes(text string) FailedScheduling {
	f := FailedScheduling{Category: schedloop.WaitTopology, Parsed: true, Reasons: map[string]int{}}
	m := volcanoHyperNodeRE.FindStringSubmatch(text)
	f.Reasons["hyperNodes available "+m[1]+"/"+m[2]] = 0
	for _, t := range volcanoHyperNodeTierRE.FindAllStringSubmatch(text[strings.Index(text, m[0]):], -1) {
		for _, item := range strings.Split(t[1], ", ") {
			if rm := volcanoHyperNodeReasonRE.FindStringSubmatch(strings.TrimSpace(item)); rm != nil {
				if n, err := strconv.Atoi(rm[1]); err == nil {
					f.Reasons["hyperNode(s) excluded by "+rm[2]] += n
				}
			}
		}
	}
	for _, nm := range volcanoHyperNodeNodeRE.FindAllStringSubmatch(text, -1) {
		if _, counts, ok := parseNodeList(nm[1]); ok {
			for r, n := range counts {
				f.Reasons[r] += n
			}
		}
	}
	return f
}

// parseKAIList reads ": <n> <reason>. \n<reason>." after one of KAI's
// headers; a header alone files under bare.
func parseKAIList(rest string, bare schedloop.WaitCategory) FailedScheduling {
	f := FailedScheduling{Category: bare, Parsed: true, Reasons: map[string]int{}}
	rest = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest), ":"))
	rest = strings.TrimSuffix(rest, ".")
	if rest == "" {
		return f
	}
	for _, item := range strings.Split(rest, kaiSeparator) {
		item = strings.TrimSuffix(strings.TrimSpace(item), ".")
		n := 1
		if m := countedItemRE.FindStringSubmatch(item); m != nil {
			if c, err := strconv.Atoi(m[1]); err == nil {
				n, item = c, m[2]
			}
		}
		if item != "" {
			f.Reasons[item] += n
		}
	}
	if c := primaryCategory(f.Reasons); c != schedloop.WaitOther || bare == schedloop.WaitOther {
		f.Category = c
	}
	return f
}

// parseYuniKornPredicates reads "<reason> (<n>x); <reason> (<n>x); ". The
// reasons are kube-scheduler's, as YuniKorn runs its predicates.
func parseYuniKornPredicates(rest string) (FailedScheduling, bool) {
	f := FailedScheduling{Category: schedloop.WaitOther, Parsed: true, Reasons: map[string]int{}}
	for _, item := range strings.Split(rest, "; ") {
		item = strings.TrimSuffix(strings.TrimSpace(item), ";")
		if item == "" {
			continue
		}
		m := yunikornCountRE.FindStringSubmatch(item)
		if m == nil {
			return FailedScheduling{Category: schedloop.WaitOther}, false
		}
		n, err := strconv.Atoi(m[2])
		if err != nil {
			return FailedScheduling{Category: schedloop.WaitOther}, false
		}
		f.Reasons[m[1]] += n
	}
	f.Category = primaryCategory(f.Reasons)
	return f, true
}
