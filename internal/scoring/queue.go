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

// QueueKey orders waiting jobs the way the scheduling queue does
// (kube-scheduler's PrioritySort): higher priority first, then earlier
// creation, then name.
type QueueKey struct {
	Priority int32
	// Created is the job's creation time in any monotone unit (the
	// simulator uses nanoseconds from the trace start).
	Created int64
	Name    string
}

// CompareQueueKeys is negative when a is tried before b.
func CompareQueueKeys(a, b QueueKey) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Created, b.Created); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}
