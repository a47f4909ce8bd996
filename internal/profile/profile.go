// Package profile is the hand-off format between the tuner and the
// scheduler: a SchedulingProfile document (score-term weights, queue limits,
// gang timeout) stored in a ConfigMap and in Postgres. It parses strictly and
// validates with errors that name the field, because a profile that reaches
// the scheduler changes where every pod lands.
//
// It knows nothing about Kubernetes clients or the database.
package profile

import (
	"bytes"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/scoring"
)

const (
	APIVersion = "schedloop.io/v1"
	Kind       = "SchedulingProfile"
	// ConfigMapKey is the data key that holds the document in the ConfigMap.
	ConfigMapKey = "profile.yaml"
	// DefaultConfigMapName is the ConfigMap the scheduler watches by default.
	DefaultConfigMapName = "schedloop-profile"
	// MaxGangTimeoutSeconds bounds how long a gang may hold reservations
	// while it waits for its last members.
	MaxGangTimeoutSeconds = int(scoring.MaxGangTimeout / time.Second)
	// MaxDocumentBytes keeps a ConfigMap-sized document from being a memory bomb.
	MaxDocumentBytes = 1 << 20
	// PredictorConfigMapKey is the data key beside ConfigMapKey that holds
	// the run-time predictor's table (predict.Table, JSON) the profile was
	// tuned with. Absent means no history: every job gets the predictor's
	// default run time, live as in a replay with an empty predictor.
	PredictorConfigMapKey = "predictor.json"
	// MaxConfigMapBytes is what the apiserver lets one ConfigMap hold (the
	// document and the table together).
	MaxConfigMapBytes = 1 << 20
	// MaxPredictorBytes bounds the table: what a ConfigMap holds less room
	// for a profile document, which is a few kilobytes; the publisher trims
	// a larger table (predict.Table.Trim) and the scheduler refuses one.
	MaxPredictorBytes = MaxConfigMapBytes - 64<<10
)

// Queue is one queue's limits; see scoring.QueueLimit for what zero means.
type Queue struct {
	MaxGPUs         int `json:"maxGPUs"`
	MaxRunningGangs int `json:"maxRunningGangs,omitempty"`
}

// Reservation is the document form of scoring.Params' reservation fields.
type Reservation struct {
	Enabled          bool `json:"enabled,omitempty"`
	ThresholdSeconds int  `json:"thresholdSeconds,omitempty"`
}

// Preemption is the document form of scoring.Params' preemption fields.
type Preemption struct {
	MinRunTimeSeconds int `json:"minRunTimeSeconds,omitempty"`
}

// Document is a SchedulingProfile. Every parameter field is the document
// form of a scoring.Params field, whose comment says what its zero value
// means; Params and FromParams are the only conversions.
type Document struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name identifies this version of the profile; the scheduler exports it
	// on /metrics and in Events.
	Name    string             `json:"name"`
	Weights map[string]float64 `json:"weights"`
	// Queues limit what each queue may hold at once; queues not listed are
	// unlimited.
	Queues map[string]Queue `json:"queues,omitempty"`
	// GangTimeoutSeconds is how long gang members wait at Permit for the rest
	// of their gang; 0 means scoring.DefaultGangTimeout (60 s) both live and
	// in the tuner's replays.
	GangTimeoutSeconds int `json:"gangTimeoutSeconds,omitempty"`
	// Order orders waiting jobs of equal priority; "" is "arrival".
	Order string `json:"order,omitempty"`
	// StarvationBoundSeconds lifts jobs that waited longer; 0 is no bound.
	StarvationBoundSeconds int          `json:"starvationBoundSeconds,omitempty"`
	Reservation            *Reservation `json:"reservation,omitempty"`
	Preemption             *Preemption  `json:"preemption,omitempty"`
}

// Default is the profile schedloop uses before any tuning.
func Default() Document { return FromParams("default", scoring.DefaultParams()) }

// Parse decodes a YAML or JSON document, rejecting unknown fields, and
// validates it.
func Parse(data []byte) (Document, error) {
	var d Document
	if len(data) > MaxDocumentBytes {
		return d, fmt.Errorf("profile: document is %d bytes, over the %d byte limit", len(data), MaxDocumentBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return d, fmt.Errorf("profile: document is empty")
	}
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		return Document{}, fmt.Errorf("profile: %w", err)
	}
	if err := d.Validate(); err != nil {
		return Document{}, err
	}
	return d, nil
}

var queueName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// Validate names the first field that is missing or out of bounds.
func (d Document) Validate() error {
	switch {
	case d.APIVersion != APIVersion:
		return fmt.Errorf("profile: apiVersion: %q is not %q", d.APIVersion, APIVersion)
	case d.Kind != Kind:
		return fmt.Errorf("profile: kind: %q is not %q", d.Kind, Kind)
	case d.Name == "":
		return fmt.Errorf("profile: name: missing")
	case len(d.Name) > 253:
		return fmt.Errorf("profile: name: %d characters, over 253", len(d.Name))
	}
	for _, name := range slices.Sorted(maps.Keys(d.Queues)) {
		if !queueName.MatchString(name) {
			return fmt.Errorf("profile: queues.%s: not a valid queue name (lower-case DNS subdomain)", name)
		}
	}
	for field, v := range map[string]int{"gangTimeoutSeconds": d.GangTimeoutSeconds, "starvationBoundSeconds": d.StarvationBoundSeconds} {
		if v < 0 {
			return fmt.Errorf("profile: %s: %d is negative", field, v)
		}
	}
	if err := d.Params().Validate(); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	return nil
}

// Params converts the document to the parameters the scheduler and the
// simulator read. It is one of the two conversions (FromParams is the
// other) between the document and scoring.Params.
func (d Document) Params() scoring.Params {
	p := scoring.Params{Weights: make(scoring.Weights, len(d.Weights)),
		GangTimeout: seconds(d.GangTimeoutSeconds), Order: scoring.OrderPolicy(d.Order),
		StarvationBound: seconds(d.StarvationBoundSeconds)}
	for k, v := range d.Weights {
		p.Weights[scoring.Term(k)] = v
	}
	if len(d.Queues) > 0 {
		p.Queues = make(map[string]scoring.QueueLimit, len(d.Queues))
		for name, q := range d.Queues {
			p.Queues[name] = scoring.QueueLimit{MaxGPUs: q.MaxGPUs, MaxRunningGangs: q.MaxRunningGangs}
		}
	}
	if r := d.Reservation; r != nil {
		p.Reservation, p.ReservationThreshold = r.Enabled, seconds(r.ThresholdSeconds)
	}
	if pr := d.Preemption; pr != nil {
		p.PreemptMinRunTime = seconds(pr.MinRunTimeSeconds)
	}
	return p
}

// FromParams renders p as a document named name. Zero weights are left
// out: an absent term counts zero.
func FromParams(name string, p scoring.Params) Document {
	d := Document{APIVersion: APIVersion, Kind: Kind, Name: name, Weights: map[string]float64{},
		GangTimeoutSeconds: int(p.GangTimeout / time.Second), Order: string(p.Order),
		StarvationBoundSeconds: int(p.StarvationBound / time.Second)}
	for t, w := range p.Weights {
		if w != 0 {
			d.Weights[string(t)] = w
		}
	}
	if len(p.Queues) > 0 {
		d.Queues = make(map[string]Queue, len(p.Queues))
		for name, q := range p.Queues {
			d.Queues[name] = Queue{MaxGPUs: q.MaxGPUs, MaxRunningGangs: q.MaxRunningGangs}
		}
	}
	if p.Reservation || p.ReservationThreshold != 0 {
		d.Reservation = &Reservation{Enabled: p.Reservation, ThresholdSeconds: int(p.ReservationThreshold / time.Second)}
	}
	if p.PreemptMinRunTime != 0 {
		d.Preemption = &Preemption{MinRunTimeSeconds: int(p.PreemptMinRunTime / time.Second)}
	}
	return d
}

func seconds(s int) time.Duration { return time.Duration(s) * time.Second }

// ScoringWeights converts the document's weights to scoring's type.
func (d Document) ScoringWeights() scoring.Weights { return d.Params().Weights }

// Marshal renders the document as YAML with keys in a stable order, so the
// same profile always produces the same ConfigMap bytes (and hash).
func (d Document) Marshal() ([]byte, error) {
	out, err := yaml.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", d.Name, err)
	}
	return out, nil
}

// ToDomain turns the document into the stored form; status and evidence
// are the caller's to fill. It carries every parameter, so a document read
// back with FromDomain means what it meant before it was stored.
func (d Document) ToDomain() schedloop.Profile {
	p := schedloop.Profile{Name: d.Name, GangTimeoutSeconds: d.GangTimeoutSeconds,
		Weights: maps.Clone(d.Weights), QueueLimits: map[string]schedloop.QueueLimit{},
		Order: d.Order, StarvationBoundSeconds: d.StarvationBoundSeconds}
	for name, q := range d.Queues {
		p.QueueLimits[name] = schedloop.QueueLimit{MaxGPUs: q.MaxGPUs, MaxRunningGang: q.MaxRunningGangs}
	}
	if r := d.Reservation; r != nil {
		p.Reservation, p.ReservationThresholdSeconds = r.Enabled, r.ThresholdSeconds
	}
	if pr := d.Preemption; pr != nil {
		p.PreemptMinRunTimeSeconds = pr.MinRunTimeSeconds
	}
	return p
}

// FromDomain builds the document of a stored profile. Optional sections
// are present exactly when they hold a non-zero value, as FromParams
// writes them.
func FromDomain(p schedloop.Profile) Document {
	d := Document{APIVersion: APIVersion, Kind: Kind, Name: p.Name, GangTimeoutSeconds: p.GangTimeoutSeconds,
		Weights: maps.Clone(p.Weights), Order: p.Order, StarvationBoundSeconds: p.StarvationBoundSeconds}
	if len(p.QueueLimits) > 0 {
		d.Queues = map[string]Queue{}
		for name, q := range p.QueueLimits {
			d.Queues[name] = Queue{MaxGPUs: q.MaxGPUs, MaxRunningGangs: q.MaxRunningGang}
		}
	}
	if p.Reservation || p.ReservationThresholdSeconds != 0 {
		d.Reservation = &Reservation{Enabled: p.Reservation, ThresholdSeconds: p.ReservationThresholdSeconds}
	}
	if p.PreemptMinRunTimeSeconds != 0 {
		d.Preemption = &Preemption{MinRunTimeSeconds: p.PreemptMinRunTimeSeconds}
	}
	return d
}

// Diff lists what changed from old to new, one line per field, in a stable
// order: the text `tuner explain` prints and Events carry.
func Diff(old, new Document) []string {
	var out []string
	for _, k := range unionKeys(old.Weights, new.Weights) {
		if a, b := old.Weights[k], new.Weights[k]; a != b {
			out = append(out, fmt.Sprintf("weights.%s: %g -> %g", k, a, b))
		}
	}
	for _, k := range unionKeys(old.Queues, new.Queues) {
		a, inOld := old.Queues[k]
		b, inNew := new.Queues[k]
		switch {
		case !inOld:
			out = append(out, fmt.Sprintf("queues.%s: added (maxGPUs %d, maxRunningGangs %d)", k, b.MaxGPUs, b.MaxRunningGangs))
		case !inNew:
			out = append(out, fmt.Sprintf("queues.%s: removed (was maxGPUs %d)", k, a.MaxGPUs))
		default:
			if a.MaxGPUs != b.MaxGPUs {
				out = append(out, fmt.Sprintf("queues.%s.maxGPUs: %d -> %d", k, a.MaxGPUs, b.MaxGPUs))
			}
			if a.MaxRunningGangs != b.MaxRunningGangs {
				out = append(out, fmt.Sprintf("queues.%s.maxRunningGangs: %d -> %d", k, a.MaxRunningGangs, b.MaxRunningGangs))
			}
		}
	}
	a, b := old.Params(), new.Params()
	if a.EffectiveGangTimeout() != b.EffectiveGangTimeout() {
		out = append(out, fmt.Sprintf("gangTimeoutSeconds: %d -> %d", old.GangTimeoutSeconds, new.GangTimeoutSeconds))
	}
	if a.EffectiveOrder() != b.EffectiveOrder() {
		out = append(out, fmt.Sprintf("order: %s -> %s", a.EffectiveOrder(), b.EffectiveOrder()))
	}
	if a.StarvationBound != b.StarvationBound {
		out = append(out, fmt.Sprintf("starvationBoundSeconds: %d -> %d", old.StarvationBoundSeconds, new.StarvationBoundSeconds))
	}
	if a.Reservation != b.Reservation {
		out = append(out, fmt.Sprintf("reservation.enabled: %t -> %t", a.Reservation, b.Reservation))
	}
	if a.ReservationThreshold != b.ReservationThreshold {
		out = append(out, fmt.Sprintf("reservation.thresholdSeconds: %g -> %g", a.ReservationThreshold.Seconds(), b.ReservationThreshold.Seconds()))
	}
	if a.PreemptMinRunTime != b.PreemptMinRunTime {
		out = append(out, fmt.Sprintf("preemption.minRunTimeSeconds: %g -> %g", a.PreemptMinRunTime.Seconds(), b.PreemptMinRunTime.Seconds()))
	}
	return out
}

func unionKeys[V any](a, b map[string]V) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}
