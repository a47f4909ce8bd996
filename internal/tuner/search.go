package tuner

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
)

// Coordinate descent over the profile's parameters: each round tries moving
// one parameter at a time up and down by a step, keeps a move when it beats
// the incumbent on the replays, and halves the steps for the next round. The
// parameters are few, bounded and partly integer, the objective is a noisy
// simulation, and every accepted move is one line of explanation — which is
// why this and not a black-box optimiser.

// SearchOptions configure Search.
type SearchOptions struct {
	Objective Objective
	Bounds    Bounds
	// Rounds of coordinate descent; steps halve each round.
	Rounds int
	// MinGain is the relative gain a move needs on the training replays to
	// be kept (it guards against chasing noise).
	MinGain float64
	// Progress, when set, hears about each evaluation.
	Progress func(done, total int, best float64)
}

// Step is one tried move.
type Step struct {
	Move     string  `json:"move"`
	Gain     float64 `json:"gain"`
	Wins     int     `json:"wins"`
	Accepted bool    `json:"accepted"`
}

// Search improves start on e's replays within o.Bounds of start.
func Search(ctx context.Context, e *Evaluator, start Candidate, o SearchOptions) (Candidate, Evaluation, []Step, error) {
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
	done, total := 1, 1+o.Rounds*movesPerRound(start)
	report := func(g float64) {
		if o.Progress != nil {
			o.Progress(done, total, g)
		}
	}
	report(0)
	for round := 0; round < o.Rounds; round++ {
		scale := math.Pow(0.5, float64(round))
		for _, mv := range moves(best, o.Bounds, scale) {
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
	return best, bestEval, steps, nil
}

type move struct {
	name  string
	apply func(Candidate) Candidate
}

func movesPerRound(c Candidate) int {
	limited := 0
	for _, q := range c.Queues {
		if q.MaxGPUs > 0 {
			limited++
		}
	}
	return 2*len(scoring.Terms) + 2*limited + 2 + len(policyMoves(c, 1))
}

func moves(c Candidate, b Bounds, scale float64) []move {
	var out []move
	dw := math.Max(1, math.Round(b.MaxWeightDelta/2*scale))
	for _, t := range scoring.Terms {
		for _, sign := range []float64{+1, -1} {
			d := sign * dw
			out = append(out, move{fmt.Sprintf("weights.%s %+g", t, d), func(c Candidate) Candidate {
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
			out = append(out, move{fmt.Sprintf("queues.%s.maxGPUs x%.2f", q, f), func(c Candidate) Candidate {
				n := c.Clone()
				lim := n.Queues[q]
				lim.MaxGPUs = max(1, int(math.Round(float64(lim.MaxGPUs)*f)))
				n.Queues[q] = lim
				return n
			}})
		}
	}
	grow, shrink := 1+scale, 1/(1+scale)
	eff := c.EffectiveGangTimeout()
	out = append(out,
		move{fmt.Sprintf("gangTimeout x%.2f", grow), func(c Candidate) Candidate {
			n := c.Clone()
			n.GangTimeout = min(time.Duration(float64(eff)*grow), scoring.MaxGangTimeout).Round(time.Second)
			return n
		}},
		move{fmt.Sprintf("gangTimeout x%.2f", shrink), func(c Candidate) Candidate {
			n := c.Clone()
			n.GangTimeout = max(time.Duration(float64(eff)*shrink), MinGangTimeout).Round(time.Second)
			return n
		}})
	return append(out, policyMoves(c, scale)...)
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
		out = append(out, move{"order " + string(o), func(c Candidate) Candidate {
			n := c.Clone()
			n.Order = o
			return n
		}})
	}
	dur := func(name string, get func(*Candidate) *time.Duration, start time.Duration) {
		cur := *get(&c)
		if cur == 0 {
			// From off there is one way: on, at the starting point.
			out = append(out, move{fmt.Sprintf("%s %s", name, start), func(c Candidate) Candidate {
				n := c.Clone()
				*get(&n) = start
				return n
			}})
			return
		}
		for _, f := range []float64{1 + scale, 1 / (1 + scale)} {
			next := min(time.Duration(float64(cur)*f), scoring.MaxPolicyDuration).Round(time.Second)
			out = append(out, move{fmt.Sprintf("%s %s", name, next), func(c Candidate) Candidate {
				n := c.Clone()
				*get(&n) = next
				return n
			}})
		}
		out = append(out, move{name + " off", func(c Candidate) Candidate {
			n := c.Clone()
			*get(&n) = 0
			return n
		}})
	}
	dur("starvationBound", func(c *Candidate) *time.Duration { return &c.StarvationBound }, startStarvationBound)
	dur("preemption.minRunTime", func(c *Candidate) *time.Duration { return &c.PreemptMinRunTime }, startPreemptMinRunTime)
	if !c.Reservation {
		return append(out, move{"reservation on", func(c Candidate) Candidate {
			n := c.Clone()
			n.Reservation = true
			return n
		}})
	}
	out = append(out, move{"reservation off", func(c Candidate) Candidate {
		n := c.Clone()
		n.Reservation, n.ReservationThreshold = false, 0
		return n
	}})
	dur("reservation.threshold", func(c *Candidate) *time.Duration { return &c.ReservationThreshold }, startReservationThreshold)
	return out
}
