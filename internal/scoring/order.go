package scoring

import (
	"cmp"
	"math"
	"time"
)

// Who runs next within a priority level. Priority always comes first (it is
// the cluster's contract with critical work); below it the profile chooses
// one of three orders (Params.Order), each with a starvation bound
// (Params.StarvationBound):
//
//   - arrival: first come, first served (kube-scheduler's PrioritySort).
//   - shortest-service: the least predicted service first, service being
//     predicted run time × GPUs (Helios's QSSF; shortest-job-first when the
//     prediction is exact). Short jobs stop queueing behind long ones, which
//     is where most of a contended cluster's JCT goes.
//   - fair-share: jobs of the queue that received the fewest recent
//     GPU-seconds first (attained service decays with a half-life), the fair
//     share of Kueue's admission fair sharing and Tiresias's LAS across
//     queues; within a queue, arrival.
//
// A job that has waited longer than the starvation bound goes ahead of
// every job of its priority that has not, oldest first, so no order can
// leave a long job waiting forever.

// DefaultAttainedHalfLife is how fast fair-share forgets a queue's usage:
// about a working day, Tiresias's and Kueue's scale for fair-share decay.
const DefaultAttainedHalfLife = 8 * time.Hour

// DynamicOrder reports whether the order of two waiting jobs can change
// while they wait (a starvation bound passing, attained service moving), so
// a queue must be re-sorted before each pass rather than kept sorted once.
func (p Params) DynamicOrder() bool {
	return p.StarvationBound > 0 || p.Order == OrderFairShare
}

// Starved reports whether a job that arrived at created has waited past the
// bound at now (both in nanoseconds on one clock).
func (p Params) Starved(created, now int64) bool {
	return p.StarvationBound > 0 && now-created > int64(p.StarvationBound)
}

// CompareOrder is negative when a is tried before b at now under p's Order
// and StarvationBound: higher priority; then, within a priority, starved
// jobs first (oldest first); then the policy's key; then CompareQueueKeys's
// arrival, gang and name tie-breaks. For fair-share the caller fills each
// key's Attained with its queue's attained service at now
// (AttainedService.Attained).
func CompareOrder(p Params, now int64, a, b QueueKey) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	sa, sb := p.Starved(a.Created, now), p.Starved(b.Created, now)
	switch {
	case sa && !sb:
		return -1
	case sb && !sa:
		return 1
	case sa && sb:
		return CompareQueueKeys(a, b)
	}
	switch p.Order {
	case OrderShortestService:
		if c := cmp.Compare(a.Service, b.Service); c != 0 {
			return c
		}
	case OrderFairShare:
		if c := cmp.Compare(a.Attained, b.Attained); c != 0 {
			return c
		}
	}
	return CompareQueueKeys(a, b)
}

// PredictedService is what shortest-service orders by: predicted run time
// in seconds × the GPUs the whole job holds (milli-GPU / 1000, so a shared
// GPU counts by its share). A job asking for no GPU is ordered by its run
// time alone, as if it held one.
func PredictedService(predicted time.Duration, demandMilli int64) float64 {
	gpus := float64(demandMilli) / MilliPerGPU
	if gpus <= 0 {
		gpus = 1
	}
	return predicted.Seconds() * gpus
}

// AttainedService is a queue's recent service in GPU-seconds, decaying with
// a half-life: the queue's share of the cluster as fair-share sees it.
// It changes only through Advance and SetRate, so a live plugin and the
// simulator account the same way: between two changes it decays and grows
// by Rate GPUs of running work.
type AttainedService struct {
	// Value is the attained GPU-seconds at At (nanoseconds).
	Value float64
	At    int64
	// Rate is the GPUs the queue's running jobs hold from At on.
	Rate float64
}

// Attained is the account's value at now (no earlier than At).
func (a AttainedService) Attained(now int64, halfLife time.Duration) float64 {
	dt := float64(now-a.At) / 1e9
	if dt <= 0 {
		return a.Value
	}
	lambda := math.Ln2 / halfLife.Seconds()
	decay := math.Exp(-lambda * dt)
	return a.Value*decay + a.Rate*(1-decay)/lambda
}

// Advance brings the account to now and changes the running GPUs by delta
// (a job starting adds its GPUs, one ending subtracts them).
func (a *AttainedService) Advance(now int64, halfLife time.Duration, delta float64) {
	a.Value = a.Attained(now, halfLife)
	if now > a.At {
		a.At = now
	}
	a.Rate = math.Max(a.Rate+delta, 0)
}
