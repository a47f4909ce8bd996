// Package predict is the run-time predictor: from the jobs that finished, it
// predicts how long a newly submitted job will run, using only what is
// known at submission (namespace, queue, owner, normalised job name, GPU
// count, priority). Shortest-service ordering and reservations read its
// predictions.
//
// It is plain computation: no Kubernetes client, no database, no clock of
// its own (callers hand it times), so the tuner, the simulator and the
// scheduler predict alike. It must not learn from anything a job's
// submission does not carry.
package predict

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Features are what is known about a job when it is submitted.
type Features struct {
	Namespace string
	Queue     string
	// Owner is the value of the owner label (configurable; empty when the
	// job has none).
	Owner string
	// Name is the job's name with its run-specific suffixes removed
	// (NormaliseName).
	Name     string
	GPUs     int
	Priority int32
}

// A level of the fallback hierarchy keys jobs by some of their features;
// the hierarchy runs from specific to general, and a prediction comes from
// the first level whose entry for the job has seen MinSamples jobs.
type level struct {
	name string
	// key is the job's key at this level; ok is false when a feature the
	// level needs is empty (such jobs are left to more general levels
	// rather than lumped together under "").
	key func(f Features) (string, bool)
}

// Levels names the fallback hierarchy in order, for evidence and docs.
var Levels = func() []string {
	out := make([]string, len(levels))
	for i, l := range levels {
		out[i] = l.name
	}
	return out
}()

// The name levels carry the queue too, so every level knows at least what
// the queue levels below it know: where job names say little (a trace's
// jobs named by row number normalise to one name), a name level without the
// queue would lump every queue's jobs of a size together and hide the
// queue's own history, which the queue levels would have used.
var levels = []level{
	{"namespace/queue/owner/name/gpus", func(f Features) (string, bool) {
		return join(f.Namespace, f.Queue, f.Owner, f.Name, gpus(f)), f.Name != "" && f.Owner != ""
	}},
	{"namespace/queue/name/gpus", func(f Features) (string, bool) {
		return join(f.Namespace, f.Queue, f.Name, gpus(f)), f.Name != ""
	}},
	{"namespace/owner/gpus", func(f Features) (string, bool) {
		return join(f.Namespace, f.Owner, gpus(f)), f.Owner != ""
	}},
	{"namespace/queue/gpus/priority", func(f Features) (string, bool) {
		return join(f.Namespace, f.Queue, gpus(f), fmt.Sprint(f.Priority)), true
	}},
	{"namespace/queue/gpus", func(f Features) (string, bool) {
		return join(f.Namespace, f.Queue, gpus(f)), true
	}},
	{"namespace/queue", func(f Features) (string, bool) { return join(f.Namespace, f.Queue), true }},
	{"gpus", func(f Features) (string, bool) { return gpus(f), true }},
	{"all", func(Features) (string, bool) { return "", true }},
}

func gpus(f Features) string { return fmt.Sprint(f.GPUs) }

func join(parts ...string) string { return strings.Join(parts, "\x00") }

// Options configure a Predictor.
type Options struct {
	// HalfLife is how fast old jobs lose weight: a job that finished one
	// half-life ago counts half as much as one that just finished.
	HalfLife time.Duration
	// MinSamples is how many jobs an entry must have seen before it
	// predicts; fewer fall back to the next level.
	MinSamples int
	// MaxEntries bounds the table; when it is full the entries updated
	// longest ago are dropped.
	MaxEntries int
	// Default is the prediction for a job when nothing has finished yet.
	Default time.Duration
}

// Defaults: a week's half-life (recent enough to follow a team's changing
// work, long enough to keep rare shapes), 3 samples, 10,000 entries, and
// one hour for a cluster with no history (the order of a typical training
// job; with no history every job gets it, so the order falls back to
// arrival).
const (
	DefaultHalfLife   = 7 * 24 * time.Hour
	DefaultMinSamples = 3
	DefaultMaxEntries = 10000
	DefaultRunTime    = time.Hour
	// MaxTableEntries is the most entries a published table may hold.
	MaxTableEntries = 100000
)

// DefaultOptions are the documented defaults.
func DefaultOptions() Options {
	return Options{HalfLife: DefaultHalfLife, MinSamples: DefaultMinSamples, MaxEntries: DefaultMaxEntries, Default: DefaultRunTime}
}

// Validate names the first field out of range.
func (o Options) Validate() error {
	switch {
	case o.HalfLife <= 0:
		return fmt.Errorf("field half_life: %v is not positive", o.HalfLife)
	case o.MinSamples < 1:
		return fmt.Errorf("field min_samples: %d is below 1", o.MinSamples)
	case o.MaxEntries < len(levels) || o.MaxEntries > MaxTableEntries:
		return fmt.Errorf("field max_entries: %d is outside %d..%d", o.MaxEntries, len(levels), MaxTableEntries)
	case o.Default <= 0:
		return fmt.Errorf("field default: %v is not positive", o.Default)
	}
	return nil
}

// entry is the recency-weighted history of one key: the weighted mean of
// log run time, so a prediction is a weighted geometric mean. Run times
// span seconds to weeks; an arithmetic mean would be set by the few
// longest jobs and rank every short job of a key as long.
type entry struct {
	// weight and sumLog are decayed to at (seconds on the caller's clock).
	weight, sumLog float64
	at             float64
	samples        int
}

// Predictor learns run times online: Observe each finished job, Predict
// each submitted one. It is not safe for concurrent use.
type Predictor struct {
	opt    Options
	lambda float64
	table  map[string]*entry // level index + key
}

// New returns an empty predictor.
func New(o Options) (*Predictor, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("predictor: %w", err)
	}
	return &Predictor{opt: o, lambda: math.Ln2 / o.HalfLife.Seconds(), table: map[string]*entry{}}, nil
}

// Len is the number of entries held.
func (p *Predictor) Len() int { return len(p.table) }

func tableKey(lvl int, key string) string { return fmt.Sprint(lvl) + "\x01" + key }

// Observe records that a job with features f ran for ran, finishing at at.
func (p *Predictor) Observe(f Features, ran time.Duration, at time.Duration) {
	now := at.Seconds()
	v := math.Log(math.Max(ran.Seconds(), 1))
	for li, l := range levels {
		key, ok := l.key(f)
		if !ok {
			continue
		}
		k := tableKey(li, key)
		e := p.table[k]
		if e == nil {
			e = &entry{at: now}
			p.table[k] = e
		}
		e.decay(now, p.lambda)
		e.weight++
		e.sumLog += v
		e.samples++
	}
	if len(p.table) > p.opt.MaxEntries {
		p.evict()
	}
}

func (e *entry) decay(now, lambda float64) {
	if now <= e.at {
		return
	}
	d := math.Exp(-lambda * (now - e.at))
	e.weight *= d
	e.sumLog *= d
	e.at = now
}

// evict drops the tenth of the table updated longest ago, so a full table
// is not scanned on every new key.
func (p *Predictor) evict() {
	type aged struct {
		k  string
		at float64
	}
	all := make([]aged, 0, len(p.table))
	for k, e := range p.table {
		all = append(all, aged{k, e.at})
	}
	slices.SortFunc(all, func(a, b aged) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return strings.Compare(a.k, b.k)
	})
	drop := len(p.table) - p.opt.MaxEntries*9/10
	for _, a := range all[:drop] {
		delete(p.table, a.k)
	}
}

// Predict is the expected run time of a job with features f, and the level
// it came from. Decay scales an entry's weights alike, so the estimate needs
// no time. A job whose features were never seen falls back to more general
// levels, and with no history at all gets the default: never an error.
func (p *Predictor) Predict(f Features) (time.Duration, string) {
	for li, l := range levels {
		key, ok := l.key(f)
		if !ok {
			continue
		}
		e := p.table[tableKey(li, key)]
		if e == nil || e.samples < p.opt.MinSamples || e.weight <= 0 {
			continue
		}
		return time.Duration(math.Exp(e.sumLog/e.weight) * float64(time.Second)), l.name
	}
	return p.opt.Default, "default"
}

// NormaliseName strips the run-specific suffixes from a job's name, so runs
// of one workload share history: trailing tokens (split at '-', '_' and
// '.') that hold a digit, or look like a generated 5-character suffix
// (Kubernetes' generateName alphabet), are dropped; the first token stays.
func NormaliseName(name string) string {
	tokens := strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return r == '-' || r == '_' || r == '.' })
	for len(tokens) > 1 {
		t := tokens[len(tokens)-1]
		if !strings.ContainsAny(t, "0123456789") && !generated(t) {
			break
		}
		tokens = tokens[:len(tokens)-1]
	}
	return strings.Join(tokens, "-")
}

// generated reports whether t could be a generateName suffix: five
// characters of the alphabet Kubernetes draws them from (no vowels).
func generated(t string) bool {
	if len(t) != 5 {
		return false
	}
	for _, r := range t {
		if !strings.ContainsRune("bcdfghjklmnpqrstvwxz2456789", r) {
			return false
		}
	}
	return true
}

// JobFeatures are the features of a job as both the tuner's replays of
// stored history and the live scheduler key it, so the scheduler looks up
// the entries the tuner fitted: job is "namespace/name" (a gang's PodGroup
// name, a lone pod's own name, as the collector stores jobs; a job without
// a "/" has no namespace), demandMilli the milli-GPU the whole job holds.
// The owner stays empty: no owner label is read on either side yet.
func JobFeatures(job, queue string, demandMilli int64, priority int32) Features {
	ns, name, ok := strings.Cut(job, "/")
	if !ok {
		ns, name = "", job
	}
	return Features{Namespace: ns, Name: NormaliseName(name), Queue: queue, GPUs: int(demandMilli / 1000), Priority: priority}
}
