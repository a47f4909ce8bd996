package predict

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func trained(t *testing.T) *Predictor {
	t.Helper()
	p := newPredictor(t, DefaultOptions())
	for i := 0; i < 5; i++ {
		p.Observe(Features{Namespace: "ml", Queue: "q", Owner: "ann", Name: "bert", GPUs: 8}, time.Duration(3+i)*time.Hour, time.Duration(i)*time.Hour)
		p.Observe(Features{Namespace: "ml", Queue: "q", GPUs: 1}, time.Duration(10+i)*time.Minute, time.Duration(i)*time.Hour)
	}
	return p
}

func TestTableRoundTrip(t *testing.T) {
	p := trained(t)
	b, err := json.Marshal(p.Table())
	if err != nil {
		t.Fatal(err)
	}
	q, err := LoadTable(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []Features{
		{Namespace: "ml", Queue: "q", Owner: "ann", Name: "bert", GPUs: 8},
		{Namespace: "ml", Queue: "q", GPUs: 1},
		{Namespace: "ml", Queue: "q", GPUs: 2},
		{Namespace: "new", Queue: "unseen", GPUs: 3},
	} {
		a, la := p.Predict(f)
		b, lb := q.Predict(f)
		if la != lb || math.Abs(a.Seconds()-b.Seconds()) > 1e-6*a.Seconds() {
			t.Errorf("%+v: %v (%s) before, %v (%s) after the round trip", f, a, la, b, lb)
		}
	}
}

func TestLoadTableRefusesBadInput(t *testing.T) {
	good := trained(t).Table()
	tests := []struct {
		name string
		mut  func(*Table)
		want string
	}{
		{"over its size", func(tb *Table) { tb.MaxEntries = len(levels); tb.Entries = append(tb.Entries, tb.Entries...) }, "field entries:"},
		{"non-finite seconds", func(tb *Table) { tb.Entries[0].Seconds = math.NaN() }, "field entries[0].seconds"},
		{"infinite weight", func(tb *Table) { tb.Entries[1].Weight = math.Inf(1) }, "field entries[1].weight"},
		{"negative samples", func(tb *Table) { tb.Entries[0].Samples = -1 }, "field entries[0].samples"},
		{"unknown level", func(tb *Table) { tb.Entries[0].Level = "user" }, "field entries[0].level"},
		{"repeated key", func(tb *Table) { tb.Entries[1] = tb.Entries[0] }, "field entries[1].key"},
		{"zero default", func(tb *Table) { tb.DefaultSeconds = 0 }, "field defaultSeconds"},
		{"non-finite half-life", func(tb *Table) { tb.HalfLifeSeconds = math.Inf(1) }, "field halfLifeSeconds"},
		{"table limit", func(tb *Table) { tb.MaxEntries = MaxTableEntries + 1 }, "field max_entries"},
	}
	for _, tc := range tests {
		tb := good
		tb.Entries = append([]TableEntry(nil), good.Entries...)
		tc.mut(&tb)
		if _, err := FromTable(tb); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.want)
		}
	}
	if _, err := LoadTable([]byte(`{"halfLifeSeconds": 1e999}`)); err == nil {
		t.Error("an out-of-range number in JSON was accepted")
	}
	if _, err := LoadTable([]byte(`{"halfLifeSeconds": 3600, "owner": "x"}`)); err == nil || !strings.Contains(err.Error(), "owner") {
		t.Errorf("unknown field: %v", err)
	}
}

func FuzzLoadTable(f *testing.F) {
	f.Add(`{"halfLifeSeconds":604800,"minSamples":3,"maxEntries":10000,"defaultSeconds":3600,"entries":[{"level":"gpus","key":"8","seconds":60,"weight":2,"samples":2,"atSeconds":5}]}`)
	f.Add(`{"halfLifeSeconds":1,"minSamples":1,"maxEntries":8,"defaultSeconds":1,"entries":[]}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, in string) {
		p, err := LoadTable([]byte(in))
		if err != nil {
			return
		}
		// A table that loads predicts something finite and positive for
		// anything, seen or not.
		for _, feat := range []Features{{GPUs: 8}, {Namespace: "x", Queue: "y", GPUs: 1}} {
			d, _ := p.Predict(feat)
			if d <= 0 {
				t.Errorf("%q predicts %v for %+v", in, d, feat)
			}
		}
	})
}

// Trim keeps the most recently updated entries that fit, in the table's
// stable order, and the trimmed table still loads.
func TestTrimDropsLeastRecentFirst(t *testing.T) {
	tb := Table{HalfLifeSeconds: 3600, MinSamples: 1, MaxEntries: 1000, DefaultSeconds: 60}
	for i := range 200 {
		tb.Entries = append(tb.Entries, TableEntry{Level: "all", Key: fmt.Sprintf("k%03d", i), Seconds: 10, Weight: 1, Samples: 1, AtSeconds: float64(i)})
	}
	full, _ := json.Marshal(tb)
	limit := len(full) / 2
	dropped, err := tb.Trim(limit)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(tb)
	if len(b) > limit || dropped == 0 || dropped+len(tb.Entries) != 200 {
		t.Fatalf("trimmed to %d bytes (limit %d), dropped %d, kept %d", len(b), limit, dropped, len(tb.Entries))
	}
	for _, e := range tb.Entries {
		if e.AtSeconds < float64(dropped) {
			t.Errorf("kept %s updated at %v while dropping %d more recent ones", e.Key, e.AtSeconds, dropped)
		}
	}
	if _, err := LoadTable(b); err != nil {
		t.Errorf("trimmed table does not load: %v", err)
	}
	if n, err := tb.Trim(len(b)); n != 0 || err != nil {
		t.Errorf("a table that fits was trimmed: %d, %v", n, err)
	}
	if _, err := tb.Trim(10); err == nil {
		t.Error("a limit below an empty table's size was met")
	}
}
