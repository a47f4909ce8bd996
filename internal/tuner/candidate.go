package tuner

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Candidate is one set of scheduler parameters the tuner can publish.
type Candidate struct {
	Weights     scoring.Weights
	Queues      map[string]scoring.QueueLimit
	GangTimeout time.Duration
}

// FromDocument reads a profile's parameters.
func FromDocument(d profile.Document) Candidate {
	c := Candidate{Weights: d.ScoringWeights(), GangTimeout: time.Duration(d.GangTimeoutSeconds) * time.Second}
	if len(d.Queues) > 0 {
		c.Queues = map[string]scoring.QueueLimit{}
		for name, q := range d.Queues {
			c.Queues[name] = scoring.QueueLimit{MaxGPUs: q.MaxGPUs, MaxRunningGangs: q.MaxRunningGangs}
		}
	}
	return c
}

// Document renders c as a profile named name.
func (c Candidate) Document(name string) profile.Document {
	d := profile.Document{APIVersion: profile.APIVersion, Kind: profile.Kind, Name: name,
		Weights: map[string]float64{}, GangTimeoutSeconds: int(c.GangTimeout / time.Second)}
	for t, w := range c.Weights {
		if w != 0 {
			d.Weights[string(t)] = w
		}
	}
	if len(c.Queues) > 0 {
		d.Queues = map[string]profile.Queue{}
		for name, q := range c.Queues {
			d.Queues[name] = profile.Queue{MaxGPUs: q.MaxGPUs, MaxRunningGangs: q.MaxRunningGangs}
		}
	}
	return d
}

// Clone deep-copies c.
func (c Candidate) Clone() Candidate {
	return Candidate{Weights: maps.Clone(c.Weights), Queues: maps.Clone(c.Queues), GangTimeout: c.GangTimeout}
}

// Key identifies c's parameters, so a search never evaluates a candidate twice.
func (c Candidate) Key() string {
	s := ""
	for _, t := range scoring.Terms {
		s += fmt.Sprintf("%s=%g;", t, c.Weights[t])
	}
	for _, q := range slices.Sorted(maps.Keys(c.Queues)) {
		s += fmt.Sprintf("q.%s=%d/%d;", q, c.Queues[q].MaxGPUs, c.Queues[q].MaxRunningGangs)
	}
	return s + fmt.Sprintf("gang=%s", c.GangTimeout)
}

// Bounds limit how far one tuning step may move a profile, so a wrong
// model cannot swing the live scheduler far in one go.
type Bounds struct {
	// MaxWeightDelta is the largest change of one term's weight.
	MaxWeightDelta float64
	// MaxQueueChange is the largest relative change of a queue's GPU limit.
	MaxQueueChange float64
	// MaxGangTimeoutFactor bounds the gang timeout to [from/f, from*f]
	// (a zero timeout may grow to MinGangTimeout*f).
	MaxGangTimeoutFactor float64
}

// DefaultBounds allow a term to move by 20 (of 0..100), a queue limit by
// half, and the gang timeout by a factor of 4.
func DefaultBounds() Bounds {
	return Bounds{MaxWeightDelta: 20, MaxQueueChange: 0.5, MaxGangTimeoutFactor: 4}
}

// MinGangTimeout is the smallest non-zero gang timeout the search proposes.
const MinGangTimeout = 30 * time.Second

// Clamp returns to limited to what b allows starting from from.
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
	f := b.MaxGangTimeoutFactor
	base := from.GangTimeout
	if base == 0 {
		base = MinGangTimeout
	}
	hi := time.Duration(float64(base) * f)
	hi = min(hi, time.Duration(profile.MaxGangTimeoutSeconds)*time.Second)
	if out.GangTimeout > hi {
		out.GangTimeout = hi
	}
	if from.GangTimeout > 0 && out.GangTimeout < time.Duration(float64(from.GangTimeout)/f) {
		out.GangTimeout = time.Duration(float64(from.GangTimeout) / f)
	}
	out.GangTimeout = out.GangTimeout.Round(time.Second)
	return out
}
