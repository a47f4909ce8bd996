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
	MaxGangTimeoutSeconds = 24 * 60 * 60
	// MaxDocumentBytes keeps a ConfigMap-sized document from being a memory bomb.
	MaxDocumentBytes = 1 << 20
)

// Queue is one queue's limits. Zero MaxRunningGangs means no gang limit.
type Queue struct {
	MaxGPUs         int `json:"maxGPUs"`
	MaxRunningGangs int `json:"maxRunningGangs,omitempty"`
}

// Document is a SchedulingProfile.
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
	// of their gang; 0 keeps the scheduler's configured default.
	GangTimeoutSeconds int `json:"gangTimeoutSeconds,omitempty"`
}

// Default is the profile schedloop uses before any tuning.
func Default() Document {
	w := map[string]float64{}
	for t, v := range scoring.DefaultWeights() {
		w[string(t)] = v
	}
	return Document{APIVersion: APIVersion, Kind: Kind, Name: "default", Weights: w}
}

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
	case d.GangTimeoutSeconds < 0 || d.GangTimeoutSeconds > MaxGangTimeoutSeconds:
		return fmt.Errorf("profile: gangTimeoutSeconds: %d is outside 0..%d", d.GangTimeoutSeconds, MaxGangTimeoutSeconds)
	}
	if err := d.ScoringWeights().Validate(); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	names := slices.Sorted(maps.Keys(d.Queues))
	for _, name := range names {
		q := d.Queues[name]
		switch {
		case !queueName.MatchString(name):
			return fmt.Errorf("profile: queues.%s: not a valid queue name (lower-case DNS subdomain)", name)
		case q.MaxGPUs < 0:
			return fmt.Errorf("profile: queues.%s.maxGPUs: %d is negative", name, q.MaxGPUs)
		case q.MaxRunningGangs < 0:
			return fmt.Errorf("profile: queues.%s.maxRunningGangs: %d is negative", name, q.MaxRunningGangs)
		}
	}
	return nil
}

// ScoringWeights converts the document's weights to scoring's type.
func (d Document) ScoringWeights() scoring.Weights {
	w := make(scoring.Weights, len(d.Weights))
	for k, v := range d.Weights {
		w[scoring.Term(k)] = v
	}
	return w
}

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
// are the caller's to fill.
func (d Document) ToDomain() schedloop.Profile {
	p := schedloop.Profile{Name: d.Name, GangTimeoutSeconds: d.GangTimeoutSeconds,
		Weights: maps.Clone(d.Weights), QueueLimits: map[string]schedloop.QueueLimit{}}
	for name, q := range d.Queues {
		p.QueueLimits[name] = schedloop.QueueLimit{MaxGPUs: q.MaxGPUs, MaxRunningGang: q.MaxRunningGangs}
	}
	return p
}

// FromDomain builds the document of a stored profile.
func FromDomain(p schedloop.Profile) Document {
	d := Document{APIVersion: APIVersion, Kind: Kind, Name: p.Name, GangTimeoutSeconds: p.GangTimeoutSeconds,
		Weights: maps.Clone(p.Weights)}
	if len(p.QueueLimits) > 0 {
		d.Queues = map[string]Queue{}
		for name, q := range p.QueueLimits {
			d.Queues[name] = Queue{MaxGPUs: q.MaxGPUs, MaxRunningGangs: q.MaxRunningGang}
		}
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
	if old.GangTimeoutSeconds != new.GangTimeoutSeconds {
		out = append(out, fmt.Sprintf("gangTimeoutSeconds: %d -> %d", old.GangTimeoutSeconds, new.GangTimeoutSeconds))
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
