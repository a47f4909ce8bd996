// Package profilewatch keeps the scheduler's active SchedulingProfile: one
// atomic holder, a watcher that loads new versions from a ConfigMap
// (hash to skip unchanged data, validate with internal/profile, swap, keep
// the last good one, an Event and a log line naming the field on refusal),
// the reload metrics, and a small plugin that pins the active profile into
// each scheduling cycle so a cycle never sees two profiles.
//
// It holds no placement logic: other plugins read weights, queue limits and
// the gang timeout from here and hand them to internal/scoring.
package profilewatch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Active is one validated profile, immutable once published.
type Active struct {
	Doc profile.Document
	// Params are Doc's parameters, converted once when the profile is
	// loaded: what every plugin reads.
	Params scoring.Params
	// Predictor is the run-time predictor published with the profile (the
	// ConfigMap's profile.PredictorConfigMapKey). Without one every job is
	// predicted to run for predict.DefaultRunTime, as a replay with an
	// empty predictor predicts. It is only read (Predict), never taught, so
	// scheduling goroutines share it.
	Predictor *predict.Predictor
	// Hash is the SHA-256 of the ConfigMap data it came from ("" for the
	// built-in default).
	Hash string
	// Generation counts successful swaps, starting at 0 for the default.
	Generation int64
}

// Holder is the one place the active profile lives.
type Holder struct {
	p atomic.Pointer[Active]

	mu     sync.Mutex
	onSwap []func(old, cur *Active)
}

// NewHolder starts with schedloop's default profile.
func NewHolder() *Holder {
	h := &Holder{}
	d := profile.Default()
	h.p.Store(&Active{Doc: d, Params: d.Params(), Predictor: emptyPredictor()})
	return h
}

func emptyPredictor() *predict.Predictor {
	p, err := predict.New(predict.DefaultOptions())
	if err != nil {
		panic("profilewatch: the predictor's default options are invalid: " + err.Error())
	}
	return p
}

// Predict is the run time the active profile's predictor expects of a job
// with features f.
func (a *Active) Predict(f predict.Features) time.Duration {
	d, _ := a.Predictor.Predict(f)
	return d
}

// Load returns the active profile.
func (h *Holder) Load() *Active { return h.p.Load() }

// OnSwap calls fn after every successful swap, with the profile replaced
// and the one now active. fn runs on the swapping goroutine and must not
// block.
func (h *Holder) OnSwap(fn func(old, cur *Active)) {
	h.mu.Lock()
	h.onSwap = append(h.onSwap, fn)
	h.mu.Unlock()
}

// Apply parses data and, when it is new and valid, makes it the active
// profile, with no predictor table. Unchanged data (same hash as the active
// profile) is a no-op; an invalid document leaves the active profile in
// place and returns an error that names the field.
func (h *Holder) Apply(data []byte) (swapped bool, err error) { return h.ApplyWithTable(data, nil) }

// ApplyWithTable is Apply with the predictor table published beside the
// document (nil or empty: none). A table that is too large or that
// predict.LoadTable refuses refuses the whole profile, naming the field:
// the document and the table were tuned together.
func (h *Holder) ApplyWithTable(data, table []byte) (swapped bool, err error) {
	sum := sha256.New()
	sum.Write(data)
	if len(table) > 0 {
		sum.Write([]byte{0})
		sum.Write(table)
	}
	hash := hex.EncodeToString(sum.Sum(nil))
	old := h.p.Load()
	if old.Hash == hash {
		return false, nil
	}
	doc, err := profile.Parse(data)
	if err != nil {
		return false, err
	}
	pred := emptyPredictor()
	if len(table) > 0 {
		if len(table) > profile.MaxPredictorBytes {
			return false, fmt.Errorf("profile %s: data.%s: %d bytes, over the %d byte limit",
				doc.Name, profile.PredictorConfigMapKey, len(table), profile.MaxPredictorBytes)
		}
		if pred, err = predict.LoadTable(table); err != nil {
			return false, fmt.Errorf("profile %s: data.%s: %w", doc.Name, profile.PredictorConfigMapKey, err)
		}
	}
	next := &Active{Doc: doc, Params: doc.Params(), Predictor: pred, Hash: hash, Generation: old.Generation + 1}
	if !h.p.CompareAndSwap(old, next) {
		return false, fmt.Errorf("profile %s: another reload won the race; retry", doc.Name)
	}
	h.mu.Lock()
	subscribers := h.onSwap
	h.mu.Unlock()
	for _, fn := range subscribers {
		fn(old, next)
	}
	return true, nil
}
