package predict

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Table is a predictor as published beside a profile (its own ConfigMap
// key, JSON): the options and every entry, so the scheduler predicts
// exactly as the tuner's replays did. It is outside input to whoever loads
// it, so LoadTable refuses anything a predictor could not hold, naming the
// field.
type Table struct {
	HalfLifeSeconds float64      `json:"halfLifeSeconds"`
	MinSamples      int          `json:"minSamples"`
	MaxEntries      int          `json:"maxEntries"`
	DefaultSeconds  float64      `json:"defaultSeconds"`
	Entries         []TableEntry `json:"entries"`
}

// TableEntry is one key's history. Key holds the level's features joined
// by "/" (as Levels names them); Seconds is the prediction, Weight its
// recency-weighted count at AtSeconds.
type TableEntry struct {
	Level     string  `json:"level"`
	Key       string  `json:"key"`
	Seconds   float64 `json:"seconds"`
	Weight    float64 `json:"weight"`
	Samples   int     `json:"samples"`
	AtSeconds float64 `json:"atSeconds"`
}

// Table exports p, entries in a stable order.
func (p *Predictor) Table() Table {
	t := Table{HalfLifeSeconds: p.opt.HalfLife.Seconds(), MinSamples: p.opt.MinSamples, MaxEntries: p.opt.MaxEntries,
		DefaultSeconds: p.opt.Default.Seconds()}
	for k, e := range p.table {
		lvl, key, _ := strings.Cut(k, "\x01")
		var li int
		fmt.Sscan(lvl, &li)
		sec := 0.0
		if e.weight > 0 {
			sec = math.Exp(e.sumLog / e.weight)
		}
		t.Entries = append(t.Entries, TableEntry{Level: levels[li].name, Key: strings.ReplaceAll(key, "\x00", "/"),
			Seconds: sec, Weight: e.weight, Samples: e.samples, AtSeconds: e.at})
	}
	slices.SortFunc(t.Entries, func(a, b TableEntry) int {
		if c := cmp.Compare(a.Level, b.Level); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return t
}

// LoadTable reads a published table. A table over its size limit, with a
// value that is not finite or out of range, an unknown level or a repeated
// key is refused with an error naming the field; the caller keeps the
// predictor it had.
func LoadTable(data []byte) (*Predictor, error) {
	var t Table
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("predictor table: %w", err)
	}
	return FromTable(t)
}

// FromTable validates t and builds its predictor.
func FromTable(t Table) (*Predictor, error) {
	for _, f := range []struct {
		name string
		v    float64
	}{{"halfLifeSeconds", t.HalfLifeSeconds}, {"defaultSeconds", t.DefaultSeconds}} {
		if !finiteIn(f.v, 1, MaxTableSeconds) {
			return nil, fmt.Errorf("predictor table: field %s: %v is outside 1..%g", f.name, f.v, float64(MaxTableSeconds))
		}
	}
	opt := Options{HalfLife: time.Duration(t.HalfLifeSeconds * float64(time.Second)), MinSamples: t.MinSamples,
		MaxEntries: t.MaxEntries, Default: time.Duration(t.DefaultSeconds * float64(time.Second))}
	p, err := New(opt)
	if err != nil {
		return nil, fmt.Errorf("predictor table: %w", err)
	}
	if len(t.Entries) > t.MaxEntries {
		return nil, fmt.Errorf("predictor table: field entries: %d entries, over maxEntries %d", len(t.Entries), t.MaxEntries)
	}
	for i, e := range t.Entries {
		li := slices.Index(Levels, e.Level)
		field := func(name string) string { return fmt.Sprintf("field entries[%d].%s", i, name) }
		switch {
		case li < 0:
			return nil, fmt.Errorf("predictor table: %s: %q is not a level (known: %s)", field("level"), e.Level, strings.Join(Levels, ", "))
		case !finiteIn(e.Seconds, 1, MaxTableSeconds):
			// Observed run times count as at least a second, so a table
			// never holds less.
			return nil, fmt.Errorf("predictor table: %s: %v is outside 1..%g", field("seconds"), e.Seconds, float64(MaxTableSeconds))
		case !finiteIn(e.Weight, 0, math.MaxFloat32):
			return nil, fmt.Errorf("predictor table: %s: %v is not a finite non-negative weight", field("weight"), e.Weight)
		case !finiteIn(e.AtSeconds, 0, math.MaxFloat32):
			return nil, fmt.Errorf("predictor table: %s: %v is not a finite non-negative time", field("atSeconds"), e.AtSeconds)
		case e.Samples < 0:
			return nil, fmt.Errorf("predictor table: %s: %d is negative", field("samples"), e.Samples)
		}
		k := tableKey(li, strings.ReplaceAll(e.Key, "/", "\x00"))
		if _, dup := p.table[k]; dup {
			return nil, fmt.Errorf("predictor table: %s: %q repeated at level %s", field("key"), e.Key, e.Level)
		}
		p.table[k] = &entry{weight: e.Weight, sumLog: e.Weight * math.Log(e.Seconds), at: e.AtSeconds, samples: e.Samples}
	}
	return p, nil
}

// MaxTableSeconds bounds every duration a table carries: a year.
const MaxTableSeconds = 365 * 24 * 3600

func finiteIn(v, lo, hi float64) bool { return !math.IsNaN(v) && v >= lo && v <= hi }

// Trim drops entries until t's JSON is at most maxBytes, the ones updated
// longest ago first (as a full predictor evicts), ties by level and key so
// the result is reproducible. What is dropped was the least recent
// history; a job whose entry went predicts from a more general level.
// It reports how many entries it dropped, or an error when even the table
// without entries is larger.
func (t *Table) Trim(maxBytes int) (dropped int, err error) {
	size := func() int {
		b, _ := json.Marshal(t)
		return len(b)
	}
	if size() <= maxBytes {
		return 0, nil
	}
	slices.SortStableFunc(t.Entries, func(a, b TableEntry) int {
		if c := cmp.Compare(b.AtSeconds, a.AtSeconds); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Level, b.Level); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	// The JSON grows with entries roughly linearly: binary search the count
	// that fits.
	all := t.Entries
	lo, hi := 0, len(all)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		t.Entries = all[:mid]
		if size() <= maxBytes {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	t.Entries = all[:lo]
	if size() > maxBytes {
		return len(all), fmt.Errorf("predictor table: %d bytes without entries, over %d", size(), maxBytes)
	}
	slices.SortFunc(t.Entries, func(a, b TableEntry) int {
		if c := cmp.Compare(a.Level, b.Level); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return len(all) - lo, nil
}
