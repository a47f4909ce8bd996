package profilewatch

import (
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
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

// A predictor table published beside the profile is loaded with it; a bad
// one refuses the profile naming the ConfigMap key and the table's field,
// and the last good profile and table stay.
func TestApplyWithTable(t *testing.T) {
	h := NewHolder()
	if d := h.Load().Predict(predict.Features{Name: "x"}); d != predict.DefaultRunTime {
		t.Errorf("no table predicts %v, want the default %v", d, predict.DefaultRunTime)
	}
	table := `{"halfLifeSeconds":3600,"minSamples":1,"maxEntries":100,"defaultSeconds":600,"entries":[{"level":"all","key":"","seconds":60,"weight":1,"samples":1,"atSeconds":0}]}`
	if _, err := h.ApplyWithTable([]byte(good), []byte(table)); err != nil {
		t.Fatal(err)
	}
	if d := h.Load().Predict(predict.Features{Name: "x"}).Round(time.Second); d != time.Minute {
		t.Errorf("table predicts %v, want 1m", d)
	}
	bad := map[string]string{
		"non-finite":    strings.Replace(table, `"seconds":60`, `"seconds":1e999`, 1),
		"unknown level": strings.Replace(table, `"level":"all"`, `"level":"moon"`, 1),
		"too large":     strings.Replace(table, `"key":""`, `"key":"`+strings.Repeat("k", profile.MaxPredictorBytes)+`"`, 1),
	}
	want := map[string]string{"non-finite": "data.predictor.json", "unknown level": "entries[0].level", "too large": "over the"}
	for name, tb := range bad {
		doc := strings.Replace(good, "name: good", "name: next", 1)
		swapped, err := h.ApplyWithTable([]byte(doc), []byte(tb))
		if swapped || err == nil || !strings.Contains(err.Error(), want[name]) || !strings.Contains(err.Error(), "data.predictor.json") {
			t.Errorf("%s: ApplyWithTable = %v, %v; want a refusal naming %q", name, swapped, err, want[name])
		}
		if a := h.Load(); a.Doc.Name != "good" || a.Predict(predict.Features{}).Round(time.Second) != time.Minute {
			t.Errorf("%s: active profile %s does not keep the last good table", name, a.Doc.Name)
		}
	}
}
