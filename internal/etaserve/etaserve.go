// Package etaserve answers "when will my job start?" and "what if …?" for a
// live cluster: it builds internal/eta's snapshot from what the collector
// stored (ready nodes, open jobs with the nodes their members hold, the
// applied profile) and predicts run times with a predictor it teaches from
// the finished jobs, predicting each before learning from it, so the error
// it measures is the error it makes.
//
// It reads the database and nothing else: it must never write to the
// database or the cluster, and holds no rule of its own (every start it
// reports is the simulator's, so internal/scoring's).
package etaserve

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	schedloop "github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/eta"
	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/tuner"
)

// Service builds snapshots and answers estimates.
type Service struct {
	Store *store.Store
	// Levels are the topology label keys, outermost first, as the
	// scheduler's profile names them.
	Levels []string
	// History is how far back finished jobs teach the predictor and open
	// jobs are read; zero means DefaultHistory.
	History time.Duration
	// Runs and Seed are the estimate's (eta.Options).
	Runs int
	Seed uint64
	// HighPriority is the priority at or above which a job may preempt,
	// as the scheduler's profile has it (0: every job above the lowest).
	HighPriority int32
	Now          func() time.Time

	mu       sync.Mutex
	last     Answer
	lastMade time.Time

	// model is the predictor and error model last learned, with the
	// finished jobs they were learned from (modelFor).
	modelMu sync.Mutex
	model   *learned
	// modelBuilds counts the models learned, for the tests.
	modelBuilds int
}

// learned is what the stored history teaches: the predictor and the
// error model, and the finished jobs they came from (key).
type learned struct {
	key      uint64
	pred     *predict.Predictor
	errs     eta.ErrorModel
	finished int
}

// InputError is a what-if asked wrongly: the field and what is wrong.
type InputError struct{ Field, Problem string }

func (e *InputError) Error() string { return fmt.Sprintf("field %s: %s", e.Field, e.Problem) }

// Cached is Pending with the last week's Accuracy, answered from the last
// estimate while it is younger than maxAge: an estimate replays the
// cluster forward several times and the score reads a week of stored
// estimates, and a dashboard refreshing every few seconds must not repeat
// that work.
func (s *Service) Cached(ctx context.Context, maxAge time.Duration) (Answer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lastMade.IsZero() && s.now().Sub(s.lastMade) < maxAge {
		return s.last, nil
	}
	a, err := s.Pending(ctx)
	if err != nil {
		return Answer{}, err
	}
	if a.Accuracy, err = s.Store.ETAAccuracy(ctx, a.At.Add(-7*24*time.Hour), a.At, eta.DefaultMinWait); err != nil {
		return Answer{}, err
	}
	s.last, s.lastMade = a, s.now()
	return a, nil
}

// DefaultHistory: two weeks of finished jobs are enough for the predictor's
// week-long half-life.
const DefaultHistory = 14 * 24 * time.Hour

// JobETA is one pending job's estimate.
type JobETA struct {
	UID       string    `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Queue     string    `json:"queue"`
	Priority  int32     `json:"priority"`
	Members   int       `json:"members"`
	GPUs      float64   `json:"gpus"`
	Created   time.Time `json:"created"`
	State     eta.State `json:"state"`
	// The start's quantiles, as times and as seconds from the estimate
	// (null when the job is not expected to start).
	P10         *time.Time `json:"p10,omitempty"`
	P50         *time.Time `json:"p50,omitempty"`
	P90         *time.Time `json:"p90,omitempty"`
	WaitP10Secs *float64   `json:"wait_p10_seconds,omitempty"`
	WaitP50Secs *float64   `json:"wait_p50_seconds,omitempty"`
	WaitP90Secs *float64   `json:"wait_p90_seconds,omitempty"`
	// PredictedRunSecs is the predicted run time the estimate used.
	PredictedRunSecs float64  `json:"predicted_run_seconds"`
	Nodes            []string `json:"nodes,omitempty"`
	WaitsFor         []string `json:"waits_for,omitempty"`
	Reason           string   `json:"reason,omitempty"`
}

// Answer is every pending job's estimate at one instant.
type Answer struct {
	At      time.Time `json:"at"`
	Profile string    `json:"profile"`
	Runs    int       `json:"runs"`
	Running int       `json:"running"`
	// ErrorSamples is how many finished jobs measured the predictor's
	// error (below eta.MinErrorSamples the default error is assumed).
	ErrorSamples int `json:"error_samples"`
	// Accuracy scores the estimates stored over the last week against the
	// starts that followed (jobs that waited over ten minutes); Cached
	// fills it, the answer the API serves.
	Accuracy store.ETAScore `json:"accuracy_7d"`
	Jobs     []JobETA       `json:"jobs"`
}

// Change alters the snapshot before the estimate: a what-if.
type Change struct {
	// Add is a job that is not submitted, estimated as if submitted now.
	Add *schedloop.Job
	// QueueLimits replace the profile's limits of the queues named.
	QueueLimits map[string]scoring.QueueLimit
	// Drain removes these nodes; the jobs running on them are left out.
	Drain []string
}

// snapshot is a built snapshot with the stored jobs behind it.
type snapshot struct {
	snap    eta.Snapshot
	opt     eta.Options
	jobs    []store.OpenJob // aligned with snap.Jobs
	profile string
	running int
	samples int
}

// Pending estimates every pending job.
func (s *Service) Pending(ctx context.Context) (Answer, error) {
	b, err := s.build(ctx, Change{})
	if err != nil {
		return Answer{}, err
	}
	return s.answer(ctx, b)
}

// WhatIf estimates the snapshot changed by c; with c.Add, only the added
// job's estimate is returned.
func (s *Service) WhatIf(ctx context.Context, c Change) (Answer, error) {
	b, err := s.build(ctx, c)
	if err != nil {
		return Answer{}, err
	}
	a, err := s.answer(ctx, b)
	if err != nil || c.Add == nil {
		return a, err
	}
	a.Jobs = slices.DeleteFunc(a.Jobs, func(j JobETA) bool { return j.UID != c.Add.UID })
	return a, nil
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Service) build(ctx context.Context, c Change) (snapshot, error) {
	now := s.now()
	since := now.Add(-cmp.Or(s.History, DefaultHistory))
	nodes, err := s.Store.ListNodes(ctx)
	if err != nil {
		return snapshot{}, err
	}
	drained := map[string]bool{}
	for _, n := range c.Drain {
		drained[n] = true
	}
	ready := nodes[:0:0]
	for _, n := range nodes {
		if n.Ready && !drained[n.Name] {
			ready = append(ready, n)
		}
	}
	if len(ready) == 0 {
		if len(c.Drain) == 0 {
			return snapshot{}, fmt.Errorf("estimate: no ready node is stored: %w", store.ErrNotFound)
		}
		return snapshot{}, &InputError{Field: "drain", Problem: fmt.Sprintf("no ready node is left of the %d stored", len(nodes))}
	}
	for _, n := range c.Drain {
		if !slices.ContainsFunc(nodes, func(s schedloop.Node) bool { return s.Name == n }) {
			return snapshot{}, &InputError{Field: "drain", Problem: fmt.Sprintf("node %q is not stored", n)}
		}
	}
	cluster := tuner.ClusterFromNodes(ready, s.Levels)
	params, name := scoring.DefaultParams(), "default"
	if p, err := s.Store.AppliedProfile(ctx); err == nil {
		params, name = profile.FromDomain(p).Params(), p.Name
	} else if !errors.Is(err, store.ErrNotFound) {
		return snapshot{}, err
	}
	if len(c.QueueLimits) > 0 {
		params = params.Clone()
		if params.Queues == nil {
			params.Queues = map[string]scoring.QueueLimit{}
		}
		for q, l := range c.QueueLimits {
			params.Queues[q] = l
		}
		if err := params.Validate(); err != nil {
			return snapshot{}, fmt.Errorf("what-if: %w", err)
		}
	}
	history, err := s.Store.JobHistory(ctx, since, now)
	if err != nil {
		return snapshot{}, err
	}
	done := finishedJobs(history, now)
	key := historyKey(done)
	m := s.cachedModel(key)
	var pred *predict.Predictor
	var obs []eta.Observation
	if m != nil {
		pred = m.pred
	} else if pred, obs, err = learn(done, now); err != nil {
		return snapshot{}, err
	}
	open, err := s.Store.OpenJobs(ctx, since)
	if err != nil {
		return snapshot{}, err
	}
	if c.Add != nil {
		if err := offered(ready, c.Add.GPUModels); err != nil {
			return snapshot{}, err
		}
		add := *c.Add
		add.Created, add.Phase = now, schedloop.PhasePending
		open = append(open, store.OpenJob{Job: add})
	}
	b := snapshot{profile: name, opt: eta.Options{Runs: s.Runs, Seed: s.Seed}}
	b.snap = eta.Snapshot{Cluster: cluster, Config: sim.Config{Params: params, Preemption: true, HighPriority: s.HighPriority}}
	for _, oj := range open {
		j := tuner.JobOf(oj.Job, 1)
		j.Predicted = predictFor(pred, oj.Job)
		ej := eta.Job{Job: j}
		began := cmp.Or(oj.Admitted, oj.Started)
		switch {
		case !began.IsZero() && len(oj.Nodes) >= j.Members:
			ej.RunningOn, ej.Elapsed = oj.Nodes[:j.Members], max(now.Sub(began), 0)
			// Measured whether drained or not: a what-if changes the
			// cluster, not the predictor's error.
			obs = append(obs, eta.Observation{Predicted: j.Predicted, Ran: ej.Elapsed, Began: began.Sub(now)})
			if slices.ContainsFunc(oj.Nodes, func(n string) bool { return drained[n] }) {
				// Drained with its node: it is not part of the changed cluster.
				continue
			}
			b.running++
		case !began.IsZero():
			// Members ended or are unknown: what it holds cannot be
			// placed, and it is not waiting either.
			continue
		default:
			ej.Queued = max(now.Sub(oj.Created), 0)
		}
		b.snap.Jobs = append(b.snap.Jobs, ej)
		b.jobs = append(b.jobs, oj)
	}
	if m == nil {
		m = &learned{key: key, pred: pred, errs: eta.NewErrorModel(obs), finished: len(done)}
		s.keepModel(m)
	}
	b.opt.Errors, b.samples = m.errs, m.finished
	return b, nil
}

// cachedModel is the model learned from the finished jobs key names, or
// nil. Learning replays two weeks of finished jobs through the predictor
// and measures its error over them (NewErrorModel alone takes tens of
// milliseconds on a busy cluster's history), and the collector estimates
// every minute and the API on each question, while the history changes
// only when a job ends. The running jobs' observations in the kept model
// are those of the instant it was learned: each says "ran at least this
// long", which stays true, only less than the job has run by now; a job
// started since would add an observation of a ratio near zero, which
// leaves the Kaplan-Meier estimate as it is. The next job to end relearns
// both.
func (s *Service) cachedModel(key uint64) *learned {
	s.modelMu.Lock()
	defer s.modelMu.Unlock()
	if s.model != nil && s.model.key == key {
		return s.model
	}
	return nil
}

func (s *Service) keepModel(m *learned) {
	s.modelMu.Lock()
	defer s.modelMu.Unlock()
	s.model = m
	s.modelBuilds++
}

// historyKey names a set of finished jobs: each one's uid, start and end.
// A job ending, or one leaving the history's window, changes it.
func historyKey(done []schedloop.Job) uint64 {
	h := fnv.New64a()
	var buf [16]byte
	for _, j := range done {
		h.Write([]byte(j.UID))
		binary.LittleEndian.PutUint64(buf[:8], uint64(tuner.Began(j).UnixNano()))
		binary.LittleEndian.PutUint64(buf[8:], uint64(j.Finished.UnixNano()))
		h.Write(buf[:])
	}
	return h.Sum64()
}

// finishedJobs are the jobs of history that had begun and ended by now,
// in the order they ended: what the predictor learns from.
func finishedJobs(history []schedloop.Job, now time.Time) []schedloop.Job {
	// Sorted as indices: moving whole jobs about made the sort most of
	// the cost of an estimate whose model is kept.
	var order []int
	for i := range history {
		j := &history[i]
		if !j.Finished.IsZero() && !j.Finished.After(now) && !tuner.Began(*j).IsZero() && j.Finished.Sub(tuner.Began(*j)) > 0 {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return history[a].Finished.Compare(history[b].Finished) })
	done := make([]schedloop.Job, len(order))
	for k, i := range order {
		done[k] = history[i]
	}
	return done
}

func (s *Service) answer(ctx context.Context, b snapshot) (Answer, error) {
	at := s.now()
	a := Answer{At: at, Profile: b.profile, Runs: cmp.Or(b.opt.Runs, eta.DefaultRuns), Running: b.running, ErrorSamples: b.samples, Jobs: []JobETA{}}
	est, err := eta.Forecast(ctx, b.snap, b.opt)
	if err != nil {
		return Answer{}, err
	}
	k := 0
	for i, sj := range b.snap.Jobs {
		if sj.Running() {
			continue
		}
		e, oj := est[k], b.jobs[i]
		k++
		je := JobETA{UID: oj.UID, Namespace: oj.Namespace, Name: oj.Name, Queue: oj.Queue, Priority: oj.Priority,
			Members: sj.Members, GPUs: float64(sj.DemandMilli()) / scoring.MilliPerGPU, Created: oj.Created, State: e.State,
			PredictedRunSecs: sj.Predicted.Seconds(), Nodes: e.Nodes, WaitsFor: e.WaitsFor, Reason: e.Reason}
		if e.State == eta.Starts {
			je.P10, je.P50 = timeAt(at, e.P10), timeAt(at, e.P50)
			p10, p50 := e.P10.Seconds(), e.P50.Seconds()
			je.WaitP10Secs, je.WaitP50Secs = &p10, &p50
			if e.P90 != eta.Never {
				je.P90 = timeAt(at, e.P90)
				p90 := e.P90.Seconds()
				je.WaitP90Secs = &p90
			}
		}
		a.Jobs = append(a.Jobs, je)
	}
	return a, nil
}

// offered refuses GPU models no ready node has: a job restricted to them
// is a mistake in its manifest, not a wait.
func offered(nodes []schedloop.Node, models []string) error {
	if len(models) == 0 {
		return nil
	}
	for _, n := range nodes {
		if slices.Contains(models, n.GPUModel) {
			return nil
		}
	}
	return &InputError{Field: "GPU models", Problem: fmt.Sprintf("no ready node has any of %v", models)}
}

func timeAt(at time.Time, d time.Duration) *time.Time {
	t := at.Add(d).UTC()
	return &t
}

// learn teaches a predictor from the finished jobs (finishedJobs) in the
// order they finished, predicting each before observing it: the pairs are
// the error the predictor makes on jobs it has not seen.
func learn(done []schedloop.Job, now time.Time) (*predict.Predictor, []eta.Observation, error) {
	p, err := predict.New(predict.DefaultOptions())
	if err != nil {
		return nil, nil, err
	}
	obs := make([]eta.Observation, 0, len(done))
	// The predictor's decay is relative, so any origin before the history
	// gives the same predictions.
	origin := now.Add(-DefaultHistory * 10)
	for _, j := range done {
		ran := j.Finished.Sub(tuner.Began(j))
		f := features(j)
		predicted, _ := p.Predict(f)
		obs = append(obs, eta.Observation{Predicted: predicted, Ran: ran, Finished: true, Began: tuner.Began(j).Sub(now)})
		p.Observe(f, ran, j.Finished.Sub(origin))
	}
	return p, obs, nil
}

// features are what a job's submission carries, as the tuner's history
// predictor keys stored jobs.
func features(j schedloop.Job) predict.Features {
	sj := tuner.JobOf(j, 1)
	return predict.JobFeatures(sj.Name, sj.Queue, sj.DemandMilli(), sj.Priority)
}

func predictFor(p *predict.Predictor, j schedloop.Job) time.Duration {
	d, _ := p.Predict(features(j))
	return d
}
