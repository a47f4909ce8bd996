package scoring

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Params is everything a SchedulingProfile sets, in the one form the live
// scheduler plugins, the simulator and the tuner all read. The profile
// document converts to and from it at its boundary and nowhere else, so a
// parameter cannot mean one thing in a replay and another live.
//
// Every zero value below has one meaning on both sides; Validate refuses
// values that could not mean the same thing on both. Errors name the
// profile document's field (weights.<term>, queues.<name>.maxGPUs, ...).
type Params struct {
	// Weights say how much each score term counts; a term that is absent
	// counts zero. At least one term must be positive.
	Weights Weights
	// Queues limits what each named queue may hold at once. A queue that is
	// not listed, and every queue when Queues is nil, is unlimited. A pod
	// without a queue is never limited.
	Queues map[string]QueueLimit
	// GangTimeout is how long a gang's placed members hold their
	// reservations while the rest of the gang is still being placed, before
	// the whole gang is released. Zero means DefaultGangTimeout, live and in
	// a replay alike; it never means "no waiting". A PodGroup's own
	// scheduleTimeoutSeconds overrides it live for that gang. A replay
	// places a gang whole or not at all (GangBacksOff: members are placed
	// back to back and a member that finds no node releases the rest at
	// once), so the timeout, which bounds only a wait for members that do
	// not yet exist, plays no part in one.
	GangTimeout time.Duration

	// Order is the policy that orders waiting jobs of equal priority. ""
	// means OrderArrival, kube-scheduler's PrioritySort (today's order).
	Order OrderPolicy
	// StarvationBound lifts a job that has waited longer than this ahead of
	// newer jobs of its priority, whatever Order says. Zero means no bound:
	// Order alone decides.
	StarvationBound time.Duration
	// Reservation, when true, lets the job at the head of the order that
	// fits nowhere reserve the earliest place it can start; other jobs may
	// use those GPUs only if they are predicted to finish first. False (the
	// zero value) reserves nothing.
	Reservation bool
	// ReservationThreshold is how long the head job must have waited before
	// it gets a reservation. Zero means at once. It must be zero when
	// Reservation is false.
	ReservationThreshold time.Duration
	// PreemptMinRunTime protects running jobs that have run less than this
	// (whole seconds since their earliest member started) from being
	// preempted (see Preemptible). Zero means every running job of lower
	// priority may be a victim.
	PreemptMinRunTime time.Duration
}

// DefaultGangTimeout is what a zero Params.GangTimeout means: the
// coscheduling plugin's customary Permit wait.
const DefaultGangTimeout = 60 * time.Second

// MaxGangTimeout bounds how long a gang may hold reservations while it
// waits for its last members.
const MaxGangTimeout = 24 * time.Hour

// MaxPolicyDuration bounds the starvation bound, the reservation threshold
// and the preemption minimum run time.
const MaxPolicyDuration = 30 * 24 * time.Hour

// OrderPolicy names a rule ordering waiting jobs of equal priority.
type OrderPolicy string

const (
	// OrderArrival tries earlier arrivals first (kube-scheduler's
	// PrioritySort).
	OrderArrival OrderPolicy = "arrival"
	// OrderShortestService tries the least predicted service (predicted run
	// time × GPUs) first.
	OrderShortestService OrderPolicy = "shortest-service"
	// OrderFairShare tries the job whose queue received the least recent
	// GPU time first.
	OrderFairShare OrderPolicy = "fair-share"
)

// OrderPolicies lists the known order policies.
var OrderPolicies = []OrderPolicy{OrderArrival, OrderShortestService, OrderFairShare}

// DefaultParams is the profile schedloop starts from before any tuning.
func DefaultParams() Params { return Params{Weights: DefaultWeights()} }

// EffectiveGangTimeout is the gang timeout p means: GangTimeout, or
// DefaultGangTimeout when it is zero.
func (p Params) EffectiveGangTimeout() time.Duration {
	if p.GangTimeout == 0 {
		return DefaultGangTimeout
	}
	return p.GangTimeout
}

// EffectiveOrder is the order policy p means: Order, or OrderArrival when
// it is empty.
func (p Params) EffectiveOrder() OrderPolicy {
	if p.Order == "" {
		return OrderArrival
	}
	return p.Order
}

// Limit is the limit of queue (the zero QueueLimit, no limit, for a queue
// that is not listed or a pod without a queue).
func (p Params) Limit(queue string) QueueLimit {
	if queue == "" {
		return QueueLimit{}
	}
	return p.Queues[queue]
}

// Clone deep-copies p.
func (p Params) Clone() Params {
	c := p
	c.Weights = maps.Clone(p.Weights)
	c.Queues = maps.Clone(p.Queues)
	return c
}

// Validate names the first field that is out of bounds or unknown.
func (p Params) Validate() error {
	if err := p.Weights.Validate(); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(p.Queues)) {
		q := p.Queues[name]
		switch {
		case name == "":
			return fmt.Errorf("queues: an empty queue name (pods without a queue are never limited)")
		case q.MaxGPUs < 0:
			return fmt.Errorf("queues.%s.maxGPUs: %d is negative", name, q.MaxGPUs)
		case q.MaxRunningGangs < 0:
			return fmt.Errorf("queues.%s.maxRunningGangs: %d is negative", name, q.MaxRunningGangs)
		}
	}
	if err := secondsInRange("gangTimeoutSeconds", p.GangTimeout, MaxGangTimeout); err != nil {
		return err
	}
	if p.Order != "" && !slices.Contains(OrderPolicies, p.Order) {
		names := make([]string, len(OrderPolicies))
		for i, o := range OrderPolicies {
			names[i] = string(o)
		}
		return fmt.Errorf("order: %q is not a known policy (known: %s)", p.Order, strings.Join(names, ", "))
	}
	if err := secondsInRange("starvationBoundSeconds", p.StarvationBound, MaxPolicyDuration); err != nil {
		return err
	}
	if err := secondsInRange("reservation.thresholdSeconds", p.ReservationThreshold, MaxPolicyDuration); err != nil {
		return err
	}
	if !p.Reservation && p.ReservationThreshold != 0 {
		return fmt.Errorf("reservation.thresholdSeconds: %d is set but reservation is off", int64(p.ReservationThreshold/time.Second))
	}
	return secondsInRange("preemption.minRunTimeSeconds", p.PreemptMinRunTime, MaxPolicyDuration)
}

// secondsInRange checks that d is whole seconds within 0..max, the form a
// profile document can carry.
func secondsInRange(field string, d, max time.Duration) error {
	if d < 0 || d > max {
		return fmt.Errorf("%s: %d is outside 0..%d", field, int64(d/time.Second), int64(max/time.Second))
	}
	if d%time.Second != 0 {
		return fmt.Errorf("%s: %s is not a whole number of seconds", field, d)
	}
	return nil
}
