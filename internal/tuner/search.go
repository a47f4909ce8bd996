package tuner

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
)

// Coordinate descent over the profile's parameters: each round tries moving
// one parameter at a time up and down by a step, keeps a move when it beats
// the incumbent on the replays, and halves the steps for the next round. The
// parameters are few, bounded and partly integer, the objective is a noisy
// simulation, and every accepted move is one line of explanation — which is
// why this and not a black-box optimiser.
//
// Coordinate descent alone misses gains that need two queue-policy fields
// at once: shortest-service order without a starvation bound can starve big
// gangs and raise idle share, a bound without the order changes nothing, and
// each move alone loses. So after the descent the search evaluates a small
// grid of queue policies (policyGrid) from the descent's best and keeps the
// grid point that beats it most. Grid first, descent after was tried: on
// the 20 most contended 80-job windows of the Philly list the seeds that won
// on the training days (shortest-service or fair-share with reservations)
// lost on the held-out ones, and half as many proposals were published.

// SearchOptions configure Search.
type SearchOptions struct {
	Objective Objective
	Bounds    Bounds
	// Rounds of coordinate descent; steps halve each round.
	Rounds int
	// MinGain is the relative gain a move needs on the training replays to
	// be kept (it guards against chasing noise).
	MinGain float64
	// Knobs are the parameters the search may move; empty means every one.
	// A scheduler that applies only some of a profile's fields live is
	// tuned on those alone, so what the replays promise is what it does.
	Knobs []Knob
	// Progress, when set, hears about each evaluation.
	Progress func(done, total int, best float64)
}

// Knob names a group of profile parameters the search moves together.
type Knob string

const (
	KnobWeights         Knob = "weights"
	KnobQueues          Knob = "queues"
	KnobOrder           Knob = "order"
	KnobStarvationBound Knob = "starvationBound"
	KnobReservation     Knob = "reservation"
	KnobPreemption      Knob = "preemption"
)

// Knobs lists every knob. The gang timeout is not one: it bounds only how
// long a gang's placed members wait at Permit for members that do not exist
// yet (a member that exists but finds no node releases the gang at once,
// scoring.GangBacksOff). Stored history records jobs whose members were all
// created together, so no replay of it can tell one timeout from another;
// a search over it would only spend evaluations, and a proposal moving it
// would promise nothing the replays measured. The profile's
// gangTimeoutSeconds stays as the operator sets it.
var Knobs = []Knob{KnobWeights, KnobQueues, KnobOrder, KnobStarvationBound, KnobReservation, KnobPreemption}

// notSearched names profile fields that were once knobs, with why the
// search leaves them alone.
var notSearched = map[Knob]string{
	"gangTimeout": "the gang timeout is not searched: it bounds only a wait for gang members not yet created, which no replay of stored history contains; set gangTimeoutSeconds in the profile",
}

// KnobList joins knobs' names with commas.
func KnobList(knobs []Knob) string {
	names := make([]string, len(knobs))
	for i, k := range knobs {
		names[i] = string(k)
	}
	return strings.Join(names, ",")
}

// ParseKnobs reads a comma-separated list of knobs ("" is every one).
func ParseKnobs(s string) ([]Knob, error) {
	var out []Knob
	for _, f := range strings.Split(s, ",") {
		k := Knob(strings.TrimSpace(f))
		if k == "" {
			continue
		}
		if why, ok := notSearched[k]; ok {
			return nil, fmt.Errorf("knob %q: %s", k, why)
		}
		if !slices.Contains(Knobs, k) {
			return nil, fmt.Errorf("knob %q is unknown (known: %s)", k, KnobList(Knobs))
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// Step is one tried move.
type Step struct {
	Move     string  `json:"move"`
	Gain     float64 `json:"gain"`
	Wins     int     `json:"wins"`
	Accepted bool    `json:"accepted"`
}

// CandidateEvaluator replays a candidate; *Evaluator is the one the tuner
// uses.
type CandidateEvaluator interface {
	Evaluate(ctx context.Context, c Candidate) (Evaluation, error)
}

// Search improves start on e's replays within o.Bounds of start: coordinate
// descent, then the queue-policy grid (policyGrid) from the descent's best.
func Search(ctx context.Context, e CandidateEvaluator, start Candidate, o SearchOptions) (Candidate, Evaluation, []Step, error) {
	if o.Rounds <= 0 {
		o.Rounds = 2
	}
	best := o.Bounds.Clamp(start, start)
	bestEval, err := e.Evaluate(ctx, best)
	if err != nil {
		return best, bestEval, nil, err
	}
	seen := map[string]bool{best.Key(): true}
	var steps []Step
	grid := policyGrid(best, o.Knobs)
	done, total := 1, 1+len(grid)+o.Rounds*len(moves(best, o.Bounds, 1, o.Knobs))
	estimated := len(grid)
	report := func(g float64) {
		if o.Progress != nil {
			o.Progress(done, total, g)
		}
	}
	report(0)
	for round := 0; round < o.Rounds; round++ {
		scale := math.Pow(0.5, float64(round))
		for _, mv := range moves(best, o.Bounds, scale, o.Knobs) {
			cand := o.Bounds.Clamp(start, mv.apply(best))
			done++
			if seen[cand.Key()] {
				report(0)
				continue
			}
			seen[cand.Key()] = true
			if cand.Validate() != nil {
				report(0)
				continue
			}
			ev, err := e.Evaluate(ctx, cand)
			if err != nil {
				return best, bestEval, steps, err
			}
			cmp := Compare(o.Objective, ev, bestEval)
			st := Step{Move: mv.name, Gain: cmp.Gain, Wins: cmp.Wins}
			if cmp.Gain > o.MinGain && 2*cmp.Wins >= len(cmp.Gains) {
				st.Accepted = true
				best, bestEval = cand, ev
			}
			steps = append(steps, st)
			report(cmp.Gain)
		}
	}
	// Every grid point is judged against the descent's best, and the one
	// that gains most (and wins on most replays) is kept, so the outcome
	// does not depend on the order the grid is walked in beyond ties.
	grid = policyGrid(best, o.Knobs)
	total += len(grid) - estimated
	from, fromEval, chosen := best, bestEval, -1
	bestGain := o.MinGain
	for _, mv := range grid {
		cand := o.Bounds.Clamp(start, mv.apply(from))
		done++
		if seen[cand.Key()] || cand.Validate() != nil {
			report(0)
			continue
		}
		seen[cand.Key()] = true
		ev, err := e.Evaluate(ctx, cand)
		if err != nil {
			return best, bestEval, steps, err
		}
		cmp := Compare(o.Objective, ev, fromEval)
		steps = append(steps, Step{Move: mv.name, Gain: cmp.Gain, Wins: cmp.Wins})
		if cmp.Gain > bestGain && 2*cmp.Wins >= len(cmp.Gains) {
			bestGain, chosen = cmp.Gain, len(steps)-1
			best, bestEval = cand, ev
		}
		report(cmp.Gain)
	}
	if chosen >= 0 {
		steps[chosen].Accepted = true
	}
	return best, bestEval, steps, nil
}

type move struct {
	knob  Knob
	name  string
	apply func(Candidate) Candidate
}

// moves lists the moves of one round from c, those of knobs only when
// knobs is not empty.
func moves(c Candidate, b Bounds, scale float64, knobs []Knob) []move {
	all := allMoves(c, b, scale)
	if len(knobs) == 0 {
		return all
	}
	out := all[:0]
	for _, mv := range all {
		if slices.Contains(knobs, mv.knob) {
			out = append(out, mv)
		}
	}
	return out
}

func allMoves(c Candidate, b Bounds, scale float64) []move {
	var out []move
	dw := math.Max(1, math.Round(b.MaxWeightDelta/2*scale))
	for _, t := range scoring.Terms {
		for _, sign := range []float64{+1, -1} {
			d := sign * dw
			out = append(out, move{KnobWeights, fmt.Sprintf("weights.%s %+g", t, d), func(c Candidate) Candidate {
				n := c.Clone()
				if n.Weights == nil {
					n.Weights = scoring.Weights{}
				}
				n.Weights[t] = math.Max(0, n.Weights[t]+d)
				return n
			}})
		}
	}
	for _, q := range slices.Sorted(maps.Keys(c.Queues)) {
		if c.Queues[q].MaxGPUs == 0 {
			continue // no limit: scaling it would invent one
		}
		for _, sign := range []float64{+1, -1} {
			f := 1 + sign*b.MaxQueueChange/2*scale
			out = append(out, move{KnobQueues, fmt.Sprintf("queues.%s.maxGPUs x%.2f", q, f), func(c Candidate) Candidate {
				n := c.Clone()
				lim := n.Queues[q]
				lim.MaxGPUs = max(1, int(math.Round(float64(lim.MaxGPUs)*f)))
				n.Queues[q] = lim
				return n
			}})
		}
	}
	return append(out, policyMoves(c, scale)...)
}

// The queue-policy grid: every order policy × starvation bound off, of
// hours (gridStarvationHours) and of a day (startStarvationBound), and the
// start's own × reservations off and on (at the start's threshold). Each
// field is varied only when its knob may move and at least two of the three
// may (one alone is coordinate descent's), so with every knob it costs at
// most 3×4×2−1 = 23 evaluations after the descent, 17 from a profile
// whose bound is off or on the grid. Preemption's minimum run time stays
// out of it: it acts only on high-priority arrivals, and descent moves it.
const gridStarvationHours = 2 * time.Hour

func policyGrid(c Candidate, knobs []Knob) []move {
	may := func(k Knob) bool { return len(knobs) == 0 || slices.Contains(knobs, k) }
	n := 0
	for _, k := range []Knob{KnobOrder, KnobStarvationBound, KnobReservation} {
		if may(k) {
			n++
		}
	}
	if n < 2 {
		return nil
	}
	orders := []scoring.OrderPolicy{c.EffectiveOrder()}
	if may(KnobOrder) {
		orders = scoring.OrderPolicies
	}
	bounds := []time.Duration{c.StarvationBound}
	if may(KnobStarvationBound) {
		for _, b := range []time.Duration{0, gridStarvationHours, startStarvationBound} {
			if !slices.Contains(bounds, b) {
				bounds = append(bounds, b)
			}
		}
		slices.Sort(bounds)
	}
	resv := []bool{c.Reservation}
	if may(KnobReservation) {
		resv = []bool{false, true}
	}
	var out []move
	for _, ord := range orders {
		for _, sb := range bounds {
			for _, r := range resv {
				name := fmt.Sprintf("policy order=%s starvationBound=%s reservation=%t", ord, sb, r)
				out = append(out, move{KnobOrder, name, func(c Candidate) Candidate {
					n := c.Clone()
					if ord != n.EffectiveOrder() {
						n.Order = ord
					}
					n.StarvationBound = sb
					if r != n.Reservation {
						n.Reservation, n.ReservationThreshold = r, 0
					}
					return n
				}})
			}
		}
	}
	return out
}

// Starting points for a queue-policy duration that is zero (off): a
// starvation bound of a day, a reservation threshold of ten minutes, a
// preemption minimum run time of ten minutes; from there the search halves
// and doubles them.
const (
	startStarvationBound      = 24 * time.Hour
	startReservationThreshold = 10 * time.Minute
	startPreemptMinRunTime    = 10 * time.Minute
)

// policyMoves tries the queue policy's fields together with the weights:
// every other order, the starvation bound, reservations on or off and
// their threshold, and the preemption minimum run time.
func policyMoves(c Candidate, scale float64) []move {
	var out []move
	for _, o := range scoring.OrderPolicies {
		if o == c.EffectiveOrder() {
			continue
		}
		out = append(out, move{KnobOrder, "order " + string(o), func(c Candidate) Candidate {
			n := c.Clone()
			n.Order = o
			return n
		}})
	}
	dur := func(knob Knob, name string, get func(*Candidate) *time.Duration, start time.Duration) {
		cur := *get(&c)
		if cur == 0 {
			// From off there is one way: on, at the starting point.
			out = append(out, move{knob, fmt.Sprintf("%s %s", name, start), func(c Candidate) Candidate {
				n := c.Clone()
				*get(&n) = start
				return n
			}})
			return
		}
		for _, f := range []float64{1 + scale, 1 / (1 + scale)} {
			next := min(time.Duration(float64(cur)*f), scoring.MaxPolicyDuration).Round(time.Second)
			out = append(out, move{knob, fmt.Sprintf("%s %s", name, next), func(c Candidate) Candidate {
				n := c.Clone()
				*get(&n) = next
				return n
			}})
		}
		out = append(out, move{knob, name + " off", func(c Candidate) Candidate {
			n := c.Clone()
			*get(&n) = 0
			return n
		}})
	}
	dur(KnobStarvationBound, "starvationBound", func(c *Candidate) *time.Duration { return &c.StarvationBound }, startStarvationBound)
	dur(KnobPreemption, "preemption.minRunTime", func(c *Candidate) *time.Duration { return &c.PreemptMinRunTime }, startPreemptMinRunTime)
	if !c.Reservation {
		return append(out, move{KnobReservation, "reservation on", func(c Candidate) Candidate {
			n := c.Clone()
			n.Reservation = true
			return n
		}})
	}
	out = append(out, move{KnobReservation, "reservation off", func(c Candidate) Candidate {
		n := c.Clone()
		n.Reservation, n.ReservationThreshold = false, 0
		return n
	}})
	dur(KnobReservation, "reservation.threshold", func(c *Candidate) *time.Duration { return &c.ReservationThreshold }, startReservationThreshold)
	return out
}
