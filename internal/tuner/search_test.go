package tuner

import (
	"context"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
)

// policySurface is an outcome surface with the shape contended histories
// have: shortest-service order alone cuts mean JCT but starves big gangs, so
// GPUs idle while they wait; a starvation bound alone changes nothing; the
// two together cut mean JCT with idle share as before.
type policySurface struct{ calls int }

func (s *policySurface) Evaluate(_ context.Context, c Candidate) (Evaluation, error) {
	s.calls++
	v := Values{MetricGPUIdle: 0.2, MetricMeanJCT: 1000, MetricP95JCT: 4000, MetricHighPriorityWait: 30, MetricFragmentation: 3}
	if c.EffectiveOrder() == scoring.OrderShortestService {
		if c.StarvationBound > 0 && c.StarvationBound <= 24*time.Hour {
			v[MetricMeanJCT] = 620
		} else {
			v[MetricMeanJCT], v[MetricGPUIdle] = 900, 0.3
		}
	}
	return Evaluation{PerReplay: []Values{v, v, v}}, nil
}

// Neither the order nor the bound helps alone, the pair does, and the search
// finds the pair.
func TestSearchFindsAJointPolicyMove(t *testing.T) {
	ctx := context.Background()
	start := Candidate{scoring.DefaultParams()}
	o := SearchOptions{Objective: DefaultObjective(), Bounds: DefaultBounds(), Rounds: 2, MinGain: 0.002}
	s := &policySurface{}
	base, _ := s.Evaluate(ctx, start)
	gain := func(c Candidate) float64 {
		ev, _ := s.Evaluate(ctx, c)
		return Compare(o.Objective, ev, base).Gain
	}
	order, bound, both := start.Clone(), start.Clone(), start.Clone()
	order.Order = scoring.OrderShortestService
	bound.StarvationBound = startStarvationBound
	both.Order, both.StarvationBound = scoring.OrderShortestService, gridStarvationHours
	if g := gain(order); g > o.MinGain {
		t.Fatalf("the surface rewards order alone: gain %.3f", g)
	}
	if g := gain(bound); g > o.MinGain {
		t.Fatalf("the surface rewards the bound alone: gain %.3f", g)
	}
	if g := gain(both); g <= o.MinGain {
		t.Fatalf("the surface does not reward the pair: gain %.3f", g)
	}

	s = &policySurface{}
	best, ev, steps, err := Search(ctx, s, start, o)
	if err != nil {
		t.Fatal(err)
	}
	if best.EffectiveOrder() != scoring.OrderShortestService || best.StarvationBound == 0 || ev.Mean()[MetricMeanJCT] != 620 {
		t.Errorf("search ended at order %s, starvation bound %s, mean JCT %v; want shortestService with a bound, 620",
			best.EffectiveOrder(), best.StarvationBound, ev.Mean()[MetricMeanJCT])
	}
	accepted := 0
	for _, st := range steps {
		if st.Accepted {
			accepted++
		}
	}
	if accepted == 0 {
		t.Errorf("no accepted step explains the change: %+v", steps)
	}
	// The grid is deterministic and bounded: the same steps twice, and at
	// most its size of evaluations more than descent alone.
	s2 := &policySurface{}
	best2, _, steps2, err := Search(ctx, s2, start, o)
	if err != nil || best2.Key() != best.Key() || len(steps2) != len(steps) || s2.calls != s.calls {
		t.Errorf("a second search differs: %v, %s vs %s, %d vs %d steps, %d vs %d evaluations",
			err, best2.Key(), best.Key(), len(steps2), len(steps), s2.calls, s.calls)
	}
}

func TestPolicyGridSize(t *testing.T) {
	c := Candidate{scoring.DefaultParams()}
	tests := []struct {
		knobs []Knob
		want  int
	}{
		{nil, 3 * 3 * 2},
		{[]Knob{KnobWeights, KnobOrder}, 0},
		{[]Knob{KnobOrder, KnobReservation}, 3 * 2},
		{[]Knob{KnobStarvationBound, KnobReservation}, 3 * 2},
	}
	for _, tc := range tests {
		if got := len(policyGrid(c, tc.knobs)); got != tc.want {
			t.Errorf("grid with knobs %v: %d points, want %d", tc.knobs, got, tc.want)
		}
	}
	c.StarvationBound = 5 * time.Hour
	if got := len(policyGrid(c, nil)); got != 3*4*2 {
		t.Errorf("grid from a 5 h bound: %d points, want %d", got, 3*4*2)
	}
}
