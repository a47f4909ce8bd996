package scoring

import (
	"cmp"
	"slices"
)

// QueueLimit caps what one queue may hold at once, live and in a replay
// alike. Zero means no limit on that dimension (a queue that may hold no
// GPUs at all is not a queue); negative values are refused (Params.Validate).
type QueueLimit struct {
	// MaxGPUs caps the GPUs the queue's admitted pods hold together, in
	// whole GPUs; GPU shares count their share (four quarter-GPU pods hold
	// one GPU).
	MaxGPUs int
	// MaxRunningGangs caps the gangs (jobs of more than one pod) admitted at once.
	MaxRunningGangs int
}

// QueueUsage is what a queue holds now: milli-GPU of admitted pods (GPU
// shares count fractionally) and gangs of more than one member admitted.
type QueueUsage struct {
	GPUMilli     int64
	RunningGangs int
}

// QueueVerdict is QueueCheck's answer.
type QueueVerdict uint8

const (
	QueueAdmitted QueueVerdict = iota
	// QueueAtGPULimit: the demand would take the queue over MaxGPUs.
	QueueAtGPULimit
	// QueueAtGangLimit: one more gang would take it over MaxRunningGangs.
	QueueAtGangLimit
)

// QueueCheck decides whether a job asking for demandMilli milli-GPU more
// (every member together; zero for a member of a gang the queue already
// counts) may be admitted to a queue holding used under limit. newGang
// marks a job of more than one member that the queue does not count yet.
// Asking for nothing more is always admitted, even in a queue over a limit
// that was lowered: a job already admitted is not turned back.
func QueueCheck(limit QueueLimit, used QueueUsage, demandMilli int64, newGang bool) QueueVerdict {
	if demandMilli == 0 && !newGang {
		return QueueAdmitted
	}
	if limit.MaxGPUs > 0 && used.GPUMilli+demandMilli > int64(limit.MaxGPUs)*MilliPerGPU {
		return QueueAtGPULimit
	}
	if newGang && limit.MaxRunningGangs > 0 && used.RunningGangs+1 > limit.MaxRunningGangs {
		return QueueAtGangLimit
	}
	return QueueAdmitted
}

// QueueAdmits reports whether QueueCheck admits the job.
func QueueAdmits(limit QueueLimit, used QueueUsage, demandMilli int64, newGang bool) bool {
	return QueueCheck(limit, used, demandMilli, newGang) == QueueAdmitted
}

// QueueKey orders waiting jobs the way the scheduling queue does: the
// stock PrioritySort (higher priority first, then earlier creation) with the
// members of one gang kept together, as schedloop's QueueSort plugin keeps
// them. The simulator queues whole jobs; the plugin queues pods and gives
// each member its gang's key and its gang's first arrival.
type QueueKey struct {
	Priority int32
	// Created is when the job (for a gang member: the first member the
	// queue saw) arrived, in any monotone unit (the simulator uses
	// nanoseconds from the trace start, the plugin Unix nanoseconds). A
	// job stopped by preemption arrives anew: its pods are deleted and
	// the ones recreated for it are new to the queue, so it waits behind
	// every job that arrived before it was stopped (Requeue).
	Created int64
	// Name is the job's (a pod's own) name: the last tie-break.
	Name string
	// Gang identifies the gang ("namespace/pod-group" live, the job's name
	// in the simulator); empty for a lone pod.
	Gang string
	// Service is the job's predicted service (PredictedService), the key
	// of OrderShortestService.
	Service float64
	// Attained is the attained service of the job's queue when the order
	// is taken, the key of OrderLeastAttained.
	Attained float64
}

// Requeue gives the n jobs stopped by preemption at now, whose keys key
// returns, their new arrivals: just after now, behind every job that
// arrived by then (those arriving at now included), as their recreated
// pods are first seen by the queue after them; among themselves in the
// order they first arrived, as their pods are recreated. Their starvation
// bounds count from their new arrivals too. The offsets are nanoseconds,
// far inside the trace's millisecond arrivals.
func Requeue(now int64, n int, key func(i int) *QueueKey) {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ka, kb := key(a), key(b)
		if c := cmp.Compare(ka.Created, kb.Created); c != 0 {
			return c
		}
		return cmp.Compare(ka.Name, kb.Name)
	})
	for rank, i := range order {
		key(i).Created = now + 1 + int64(rank)
	}
}

// CompareQueueKeys is negative when a is tried before b: higher priority,
// then earlier arrival, then lone pods before gangs and gangs by key (two
// gangs that arrived together do not interleave), then name.
func CompareQueueKeys(a, b QueueKey) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Created, b.Created); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Gang, b.Gang); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}
