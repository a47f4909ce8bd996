// Package reasons is the vocabulary of wait reasons that schedloop's own
// scheduler plugins report and that the events parser reads back.
//
// It is a leaf on purpose: the scheduler plugins import it to say why a pod
// waits, and internal/events imports it to recognise those words in
// FailedScheduling messages, so neither side has to import the other. It must
// hold only strings and the functions that write and read them; no Kubernetes
// client, no scheduler framework, no I/O.
//
// The strings are a wire format: they are stored in Postgres and matched by
// the parser, so changing one breaks history. Add new reasons instead.
// None of them contains ", " followed by a digit, because kube-scheduler joins
// per-node reasons as "<count> <reason>, <count> <reason>" and the parser
// splits on exactly that.
package reasons

import (
	"fmt"
	"regexp"
	"strconv"
)

// Formats of the reasons schedloop's scheduler emits. Use the constructor
// functions below rather than these directly, so the arguments stay in order.
const (
	// GangIncompleteFormat: namespace, pod group name, members present, minMember.
	GangIncompleteFormat = "gang %s/%s incomplete: %d/%d members"
	// GangNoRoomFormat: namespace, pod group name, what is short (ShortGPUs
	// or ShortCPUMemory), members the free capacity fits, members
	// outstanding. Every member exists; the gang waits for capacity, not for
	// members, and is filed as a shortage of what it names.
	GangNoRoomFormat = "gang %s/%s waits for %s: free capacity fits %d/%d members"
	// GangNoPreemptFormat: the gang's key, namespace/name. The gang
	// plugin's PostFilter message for a member of a gang that found no
	// node: only lone pods preempt. kube-scheduler appends it after the
	// node list, where a preemption plugin's message would stand.
	GangNoPreemptFormat = "gang %s does not preempt: only lone pods evict others"
	// QueueLimitFormat: queue name, the queue's GPU limit.
	QueueLimitFormat = "queue %s at limit %d GPUs"
	// QueueGangLimitFormat: queue name, the queue's limit on running gangs.
	QueueGangLimitFormat = "queue %s at limit %d running gangs"
	// TopologyFormat: GPUs the gang needs, topology level, level again, free
	// GPUs in the largest free domain of that level. A semicolon, not a
	// comma, separates the clauses (see the package comment).
	TopologyFormat = "topology: gang needs %d GPUs within one %s; largest free %s has %d"
	// ReservedFormat: the job holding the reservation (namespace/name). A
	// node reserved for it is refused to a job predicted to run past the
	// reservation's start.
	ReservedFormat = "reserved for %s"
)

// GangIncomplete says that a gang cannot be admitted because fewer than
// minMember of its pods exist or fit.
func GangIncomplete(namespace, name string, have, want int) string {
	return fmt.Sprintf(GangIncompleteFormat, namespace, name, have, want)
}

// What a gang that does not fit is short of (GangNoRoom).
const (
	ShortGPUs      = "GPUs"
	ShortCPUMemory = "CPU or memory"
)

// GangNoRoom says that every member of a gang exists but the free capacity
// fits only fit of its outstanding members, short is what it lacks.
func GangNoRoom(namespace, name, short string, fit, outstanding int) string {
	return fmt.Sprintf(GangNoRoomFormat, namespace, name, short, fit, outstanding)
}

// GangNoPreempt says that the gang key, one of whose members found no node,
// evicts no pods for it.
func GangNoPreempt(key string) string { return fmt.Sprintf(GangNoPreemptFormat, key) }

// QueueAtLimit says that admitting the pod would take its queue over its GPU limit.
func QueueAtLimit(queue string, limitGPUs int) string {
	return fmt.Sprintf(QueueLimitFormat, queue, limitGPUs)
}

// QueueAtGangLimit says that admitting the pod's gang would take its queue
// over its limit on running gangs.
func QueueAtGangLimit(queue string, limitGangs int) string {
	return fmt.Sprintf(QueueGangLimitFormat, queue, limitGangs)
}

// TopologyUnsatisfied says that no single domain of the given topology level
// has enough free GPUs for the whole gang.
func TopologyUnsatisfied(gpus int, level string, largestFree int) string {
	return fmt.Sprintf(TopologyFormat, gpus, level, level, largestFree)
}

// Reserved says that a node is reserved for job, which is ahead in the
// order and cannot start yet, and the pod is predicted to run past the
// reservation's start.
func Reserved(job string) string { return fmt.Sprintf(ReservedFormat, job) }

// Kind names one of schedloop's own reasons.
type Kind string

const (
	KindGangIncomplete Kind = "gang_incomplete"
	KindGangNoRoom     Kind = "gang_no_room"
	KindQueueLimit     Kind = "queue_limit"
	KindTopology       Kind = "topology"
	KindReserved       Kind = "reserved"
)

// Parsed is one of schedloop's own reasons with its arguments recovered.
// Fields that the reason's kind does not carry are zero.
type Parsed struct {
	Kind      Kind
	Namespace string
	Name      string // pod group or queue name
	// Have and Want: members present (or, for KindGangNoRoom, that fit)
	// and members wanted (outstanding).
	Have    int
	Want    int
	GPUs    int
	Level   string
	Largest int
	Limit   int
	// Short is what a KindGangNoRoom gang lacks: ShortGPUs or ShortCPUMemory.
	Short string
	// RunningGangs marks a queue limit on running gangs (QueueAtGangLimit);
	// Limit then counts gangs, not GPUs. Both are KindQueueLimit.
	RunningGangs bool
}

// The patterns mirror the formats above; TestRoundTrip keeps them in step.
var (
	gangRE      = regexp.MustCompile(`^gang ([^/\s]+)/(\S+) incomplete: (\d+)/(\d+) members$`)
	gangRoomRE  = regexp.MustCompile(`^gang ([^/\s]+)/(\S+) waits for (GPUs|CPU or memory): free capacity fits (\d+)/(\d+) members$`)
	queueRE     = regexp.MustCompile(`^queue (\S+) at limit (\d+) GPUs$`)
	queueGangRE = regexp.MustCompile(`^queue (\S+) at limit (\d+) running gangs$`)
	reservedRE  = regexp.MustCompile(`^reserved for ([^/\s]+)/(\S+)$`)
	topologyRE  = regexp.MustCompile(`^topology: gang needs (\d+) GPUs within one (\S+); largest free (\S+) has (\d+)$`)
)

// Parse recognises a reason written by GangIncomplete, GangNoRoom, QueueAtLimit,
// QueueAtGangLimit, TopologyUnsatisfied or Reserved. ok is false for any other text, including numbers too
// large for an int.
func Parse(reason string) (p Parsed, ok bool) {
	if m := gangRE.FindStringSubmatch(reason); m != nil {
		have, err1 := strconv.Atoi(m[3])
		want, err2 := strconv.Atoi(m[4])
		if err1 != nil || err2 != nil {
			return Parsed{}, false
		}
		return Parsed{Kind: KindGangIncomplete, Namespace: m[1], Name: m[2], Have: have, Want: want}, true
	}
	if m := gangRoomRE.FindStringSubmatch(reason); m != nil {
		have, err1 := strconv.Atoi(m[4])
		want, err2 := strconv.Atoi(m[5])
		if err1 != nil || err2 != nil {
			return Parsed{}, false
		}
		return Parsed{Kind: KindGangNoRoom, Namespace: m[1], Name: m[2], Short: m[3], Have: have, Want: want}, true
	}
	if m := queueRE.FindStringSubmatch(reason); m != nil {
		limit, err := strconv.Atoi(m[2])
		if err != nil {
			return Parsed{}, false
		}
		return Parsed{Kind: KindQueueLimit, Name: m[1], Limit: limit}, true
	}
	if m := queueGangRE.FindStringSubmatch(reason); m != nil {
		limit, err := strconv.Atoi(m[2])
		if err != nil {
			return Parsed{}, false
		}
		return Parsed{Kind: KindQueueLimit, Name: m[1], Limit: limit, RunningGangs: true}, true
	}
	if m := topologyRE.FindStringSubmatch(reason); m != nil {
		gpus, err1 := strconv.Atoi(m[1])
		largest, err2 := strconv.Atoi(m[4])
		if err1 != nil || err2 != nil || m[2] != m[3] {
			return Parsed{}, false
		}
		return Parsed{Kind: KindTopology, GPUs: gpus, Level: m[2], Largest: largest}, true
	}
	if m := reservedRE.FindStringSubmatch(reason); m != nil {
		return Parsed{Kind: KindReserved, Namespace: m[1], Name: m[2]}, true
	}
	return Parsed{}, false
}
