package tuner

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Candidate is one set of scheduler parameters the tuner can publish: the
// parameters a profile carries (scoring.Params), replayed as they are.
type Candidate struct {
	scoring.Params
}

// FromDocument reads a profile's parameters.
func FromDocument(d profile.Document) Candidate { return Candidate{d.Params()} }

// Document renders c as a profile named name.
func (c Candidate) Document(name string) profile.Document { return profile.FromParams(name, c.Params) }

// Clone deep-copies c.
func (c Candidate) Clone() Candidate { return Candidate{c.Params.Clone()} }

// Key identifies c's parameters, so a search never evaluates a candidate twice.
func (c Candidate) Key() string {
	s := ""
	for _, t := range scoring.Terms {
		s += fmt.Sprintf("%s=%g;", t, c.Weights[t])
	}
	for _, q := range slices.Sorted(maps.Keys(c.Queues)) {
		s += fmt.Sprintf("q.%s=%d/%d;", q, c.Queues[q].MaxGPUs, c.Queues[q].MaxRunningGangs)
	}
	s += fmt.Sprintf("gang=%s;order=%s;starve=%s;", c.EffectiveGangTimeout(), c.EffectiveOrder(), c.StarvationBound)
	return s + fmt.Sprintf("resv=%t/%s;minrun=%s", c.Reservation, c.ReservationThreshold, c.PreemptMinRunTime)
}

// Bounds limit how far one tuning step may move a profile, so a wrong
// model cannot swing the live scheduler far in one go.
type Bounds struct {
	// MaxWeightDelta is the largest change of one term's weight.
	MaxWeightDelta float64 `json:"maxWeightDelta"`
	// MaxQueueChange is the largest relative change of a queue's GPU limit.
	MaxQueueChange float64 `json:"maxQueueChange"`
}

// DefaultBounds allow a term to move by 20 (of 0..100) and a queue limit by
// half.
func DefaultBounds() Bounds {
	return Bounds{MaxWeightDelta: 20, MaxQueueChange: 0.5}
}

// Clamp returns to limited to what b allows starting from from. The gang
// timeout stays from's: no replay of stored history can tell one value from
// another (it bounds only a wait for members not yet created), so a step
// never moves it.
func (b Bounds) Clamp(from, to Candidate) Candidate {
	out := to.Clone()
	if out.Weights == nil {
		out.Weights = scoring.Weights{}
	}
	for _, t := range scoring.Terms {
		w0, w := from.Weights[t], out.Weights[t]
		w = math.Min(math.Max(w, w0-b.MaxWeightDelta), w0+b.MaxWeightDelta)
		w = math.Min(math.Max(w, 0), scoring.MaxWeight)
		if w == 0 {
			delete(out.Weights, t)
		} else {
			out.Weights[t] = w
		}
	}
	for name, q := range out.Queues {
		q0, ok := from.Queues[name]
		if !ok || q0.MaxGPUs == 0 {
			continue
		}
		lo := int(math.Ceil(float64(q0.MaxGPUs) * (1 - b.MaxQueueChange)))
		hi := int(math.Floor(float64(q0.MaxGPUs) * (1 + b.MaxQueueChange)))
		q.MaxGPUs = min(max(q.MaxGPUs, max(lo, 1)), hi)
		out.Queues[name] = q
	}
	out.GangTimeout = from.GangTimeout
	return out
}
