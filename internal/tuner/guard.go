package tuner

import (
	"fmt"
	"math"
)

// Guardrails decide whether a proposal may reach the scheduler and whether
// an applied profile must be rolled back.
type Guardrails struct {
	// Margin is the relative held-out gain a proposal must reach (0.02: 2%
	// better than the current profile under the objective).
	Margin float64 `json:"margin"`
	// Bounds limit each step's change (see Bounds.Clamp).
	Bounds Bounds `json:"bounds"`
	// RollbackThreshold is the measured relative regression, against the
	// same length of time before the profile was applied, that rolls it back.
	RollbackThreshold float64 `json:"rollbackThreshold"`
	// HeadlineTolerance is how much worse (relative, 0.02: 2%) any headline
	// number may get on the held-out replays for a proposal to publish,
	// whatever the weighted objective gains: a lower idle share must not be
	// bought with a longer p95 JCT.
	HeadlineTolerance float64 `json:"headlineTolerance"`
}

// Headline are the product's numbers no proposal may worsen past the
// tolerance, in the order a blocking one is named.
var Headline = []Metric{MetricGPUIdle, MetricMeanJCT, MetricP95JCT, MetricHighPriorityWait}

// DefaultGuardrails: a 2% held-out margin, no headline number more than 2%
// worse, DefaultBounds, roll back past a 5% measured regression.
func DefaultGuardrails() Guardrails {
	return Guardrails{Margin: 0.02, Bounds: DefaultBounds(), RollbackThreshold: 0.05, HeadlineTolerance: 0.02}
}

// Validate names the first field out of range.
func (g Guardrails) Validate() error {
	switch {
	case !(g.Margin >= 0 && g.Margin < 1):
		return fmt.Errorf("guardrails: margin %v is outside [0, 1)", g.Margin)
	case !(g.HeadlineTolerance >= 0 && g.HeadlineTolerance < 1):
		return fmt.Errorf("guardrails: headline tolerance %v is outside [0, 1)", g.HeadlineTolerance)
	case !(g.RollbackThreshold > 0 && g.RollbackThreshold < 1):
		return fmt.Errorf("guardrails: rollback threshold %v is outside (0, 1)", g.RollbackThreshold)
	case !(g.Bounds.MaxWeightDelta > 0):
		return fmt.Errorf("guardrails: max weight delta %v must be positive", g.Bounds.MaxWeightDelta)
	case !(g.Bounds.MaxQueueChange > 0 && g.Bounds.MaxQueueChange < 1):
		return fmt.Errorf("guardrails: max queue change %v is outside (0, 1)", g.Bounds.MaxQueueChange)
	}
	return nil
}

// Decision is whether to publish, and why, in words with the numbers.
type Decision struct {
	Publish bool   `json:"publish"`
	Reason  string `json:"reason"`
}

// Decide judges a proposal by its held-out comparison with the current
// profile: the mean gain must reach the margin, the 95% lower bound must be
// above zero, and no headline number may be worse by more than the
// tolerance.
func (g Guardrails) Decide(held Comparison, changed bool) Decision {
	if !changed {
		return Decision{false, "the search found nothing better than the current profile on the training days"}
	}
	if m, worse, ok := g.worsened(held); ok {
		return Decision{false, fmt.Sprintf("%s is %.1f%% worse on the held-out replays (%.4g to %.4g), past the %.1f%% tolerance, although the objective gains %.1f%%",
			m, 100*worse, held.Before[m], held.After[m], 100*g.HeadlineTolerance, 100*held.Gain)}
	}
	switch {
	case held.Gain < g.Margin:
		return Decision{false, fmt.Sprintf("held-out gain %.1f%% is below the %.1f%% margin", 100*held.Gain, 100*g.Margin)}
	case held.Lower <= 0:
		return Decision{false, fmt.Sprintf("held-out gain %.1f%% is not better with 95%% confidence (lower bound %.1f%%, %d of %d replays better)",
			100*held.Gain, 100*held.Lower, held.Wins, len(held.Gains))}
	}
	return Decision{true, fmt.Sprintf("held-out gain %.1f%% (95%% lower bound %.1f%%, %d of %d replays better) beats the %.1f%% margin",
		100*held.Gain, 100*held.Lower, held.Wins, len(held.Gains), 100*g.Margin)}
}

// worsened names the first headline number the proposal makes worse by more
// than the tolerance, and by how much (relative to the current profile's,
// or to the metric's floor when that is near zero, so noise around zero
// blocks nothing).
func (g Guardrails) worsened(held Comparison) (Metric, float64, bool) {
	for _, m := range Headline {
		before, after := held.Before[m], held.After[m]
		if worse := (after - before) / math.Max(before, floors[m]); worse > g.HeadlineTolerance {
			return m, worse, true
		}
	}
	return "", 0, false
}

// Verdict is the outcome of checking an applied profile against what was
// measured before it.
type Verdict struct {
	Rollback   bool
	Regression float64
	Reason     string
}

// Check compares the outcome measured since a profile was applied with the
// outcome measured over as long a time before, under o.
// A before with nothing the objective weighs (no finished job, no GPU
// minute) is no baseline: there is nothing to regress from.
func (g Guardrails) Check(o Objective, measured, before Values) Verdict {
	if o.Cost(before, before) == 0 {
		return Verdict{false, 0, "nothing was measured before the profile was applied, so there is no baseline to compare with"}
	}
	reg := o.Cost(measured, before) - 1
	if reg > g.RollbackThreshold {
		return Verdict{true, reg, fmt.Sprintf("measured outcome regressed %.1f%% (threshold %.1f%%)", 100*reg, 100*g.RollbackThreshold)}
	}
	return Verdict{false, reg, fmt.Sprintf("measured change %+.1f%% is within the %.1f%% threshold", 100*reg, 100*g.RollbackThreshold)}
}
