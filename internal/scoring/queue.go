package scoring

import "cmp"

// QueueLimit caps what one queue may hold at once. Zero means no limit on
// that dimension (a queue that may hold no GPUs at all is not a queue).
type QueueLimit struct {
	MaxGPUs         int
	MaxRunningGangs int
}

// QueueUsage is what a queue holds now: milli-GPU of admitted pods (GPU
// shares count fractionally) and gangs of more than one member admitted.
type QueueUsage struct {
	GPUMilli     int64
	RunningGangs int
}

// QueueAdmits reports whether a job asking for demandMilli milli-GPU in all
// (every member together) may be admitted to a queue holding used under
// limit. gang marks a job of more than one member.
func QueueAdmits(limit QueueLimit, used QueueUsage, demandMilli int64, gang bool) bool {
	if limit.MaxGPUs > 0 && used.GPUMilli+demandMilli > int64(limit.MaxGPUs)*MilliPerGPU {
		return false
	}
	if gang && limit.MaxRunningGangs > 0 && used.RunningGangs+1 > limit.MaxRunningGangs {
		return false
	}
	return true
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
	// nanoseconds from the trace start, the plugin Unix nanoseconds).
	Created int64
	// Name is the job's (a pod's own) name: the last tie-break.
	Name string
	// Gang identifies the gang ("namespace/pod-group" live, the job's name
	// in the simulator); empty for a lone pod.
	Gang string
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
