package profilewatch

import (
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
)

const good = `apiVersion: schedloop.io/v1
kind: SchedulingProfile
name: good
weights: {bestfit: 1}
queues:
  research: {maxGPUs: 0, maxRunningGangs: 2}
`

// A profile whose parameters could not mean the same live and replayed is
// refused naming the field, and the last good profile stays active.
func TestApplyKeepsTheLastGoodProfile(t *testing.T) {
	h := NewHolder()
	if _, err := h.Apply([]byte(good)); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"negative limit":            strings.Replace(good, "maxGPUs: 0", "maxGPUs: -4", 1),
		"unknown policy":            good + "order: lottery\n",
		"negative timeout":          good + "gangTimeoutSeconds: -1\n",
		"threshold, no reservation": good + "reservation: {thresholdSeconds: 30}\n",
	}
	wantField := map[string]string{
		"negative limit":            "queues.research.maxGPUs: -4 is negative",
		"unknown policy":            `order: "lottery" is not a known policy`,
		"negative timeout":          "gangTimeoutSeconds",
		"threshold, no reservation": "reservation.thresholdSeconds: 30 is set but reservation is off",
	}
	for name, doc := range bad {
		swapped, err := h.Apply([]byte(doc))
		if swapped || err == nil || !strings.Contains(err.Error(), wantField[name]) {
			t.Errorf("%s: Apply = %v, %v; want a refusal naming %q", name, swapped, err, wantField[name])
		}
		if a := h.Load(); a.Doc.Name != "good" || a.Generation != 1 {
			t.Errorf("%s: active profile is %s (generation %d), want the last good one", name, a.Doc.Name, a.Generation)
		}
	}
	p := h.Load().Params
	if p.Limit("research") != (scoring.QueueLimit{MaxRunningGangs: 2}) || p.EffectiveGangTimeout() != time.Minute {
		t.Errorf("active parameters %+v", p)
	}
}
