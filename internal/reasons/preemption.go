package reasons

import (
	"fmt"
	"regexp"
	"strconv"
)

// PreemptedFormat is the note of the "Preempted" Event schedloop's
// preemption records on each victim pod, and the message of the pod's
// DisruptionTarget condition: the preemptor pod (namespace/name), its
// priority, the node it was nominated to, the victim's job (namespace/name
// of its gang, or of the pod when it runs alone) and the GPU-hours the whole
// job loses (GPUs held × time run). A semicolon, not a comma, separates the
// clauses (see the package comment).
const PreemptedFormat = "Preempted by pod %s (priority %d) on node %s; job %s loses %.4f GPU-hours"

// Preemption is why a pod was evicted by schedloop's preemption.
type Preemption struct {
	// Preemptor is namespace/name of the pod the victim made room for.
	Preemptor string
	Priority  int32
	Node      string
	// Job is namespace/name of the victim's job: evicted whole.
	Job string
	// GPUHours is what the whole job lost.
	GPUHours float64
}

// String is the cause written as PreemptedFormat.
func (p Preemption) String() string {
	return fmt.Sprintf(PreemptedFormat, p.Preemptor, p.Priority, p.Node, p.Job, p.GPUHours)
}

var preemptedRE = regexp.MustCompile(`^Preempted by pod ([^/\s]+/\S+) \(priority (-?\d+)\) on node (\S+); job ([^/\s]+/\S+) loses (\d+(?:\.\d+)?) GPU-hours$`)

// ParsePreemption reads a cause written by Preemption.String. ok is false
// for any other text (kube-scheduler's own "Preempted by pod <uid> on node
// <node>" included), and for a priority outside int32.
func ParsePreemption(s string) (p Preemption, ok bool) {
	m := preemptedRE.FindStringSubmatch(s)
	if m == nil {
		return Preemption{}, false
	}
	prio, err1 := strconv.ParseInt(m[2], 10, 32)
	hours, err2 := strconv.ParseFloat(m[5], 64)
	if err1 != nil || err2 != nil {
		return Preemption{}, false
	}
	return Preemption{Preemptor: m[1], Priority: int32(prio), Node: m[3], Job: m[4], GPUHours: hours}, true
}
