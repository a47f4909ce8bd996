// Package lifecycle is a tuned profile's life, the one copy `tuner run`,
// `tuner loop`, `tuner verify` and the demo share: read the workload a run
// names, record the proposal with its evidence, publish it, measure it once
// it has run, and roll it back when it regressed.
//
// It decides nothing: whether to publish and whether to roll back are
// internal/tuner's rules, the database is internal/store's, and the
// scheduler is reached only through a Publisher.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/trace"
	"github.com/schedloop/schedloop/internal/tuner"
)

// Publisher hands a profile to the scheduler: the profile ConfigMap in a
// cluster (publish.ConfigMapPublisher), with the predictor table it was
// tuned with (nil: none, every job predicted the default run time).
// annotations name the evidence. note says what publishing changed (a
// trimmed table), "" for nothing.
type Publisher interface {
	Publish(ctx context.Context, d profile.Document, table *predict.Table, annotations map[string]string) (note string, err error)
}

// Lifecycle records profiles in Store and publishes them through Publisher
// (nil: the database is the only record, as without a cluster). Out hears
// one line per step.
type Lifecycle struct {
	Store     *store.Store
	Publisher Publisher
	Out       io.Writer
}

func (l *Lifecycle) say(format string, a ...any) {
	if l.Out != nil {
		fmt.Fprintf(l.Out, format+"\n", a...)
	}
}

// Load reads the workload src names: its job and node files, or the jobs
// stored for its window (and namespace) and the nodes seen since the window
// began. s may be nil when src names both files.
func Load(ctx context.Context, s *store.Store, src tuner.Source) (tuner.Workload, error) {
	var w tuner.Workload
	switch {
	case src.NodesFile != "":
		inv, err := trace.LoadInventory(src.NodesFile, trace.Format(src.Format), nil, src.Fanout)
		if err != nil {
			return w, fmt.Errorf("nodes file: %w", err)
		}
		w.Cluster = sim.NewCluster(inv)
	case s != nil:
		nodes, err := s.ListNodes(ctx)
		if err != nil {
			return w, err
		}
		// A node last seen before the window did not take part in it.
		seen := nodes[:0]
		for _, n := range nodes {
			if src.From.IsZero() || !n.LastSeen.Before(src.From) {
				seen = append(seen, n)
			}
		}
		w.Cluster = tuner.ClusterFromNodes(seen, src.Levels)
	default:
		return w, errors.New("no nodes file and no database to read nodes from")
	}
	switch {
	case src.JobsFile != "":
		tj, err := trace.LoadJobs(src.JobsFile, trace.Format(src.Format))
		if err != nil {
			return w, fmt.Errorf("jobs file: %w", err)
		}
		trace.SortByArrival(tj)
		w.Jobs = sim.JobsFromTrace(tj)
	case s != nil:
		hist, err := History(ctx, s, src)
		if err != nil {
			return w, err
		}
		w.Jobs = tuner.JobsFromHistory(hist, src.From, src.To, src.Util)
		// With Kueue's ClusterQueues stored, Kueue is in front of the
		// replays, as it was in front of the cluster.
		cqs, err := s.KueueClusterQueues(ctx)
		if err != nil {
			return w, err
		}
		wls, err := s.KueueWorkloads(ctx, src.Namespace)
		if err != nil {
			return w, err
		}
		w.Kueue = tuner.KueueFrontFromHistory(cqs, wls, w.Jobs, src.KueueFairSharing)
	default:
		return w, errors.New("no jobs file and no database to read the history from")
	}
	if src.MaxJobs > 0 && len(w.Jobs) > src.MaxJobs {
		w.Jobs = w.Jobs[:src.MaxJobs]
	}
	if len(w.Cluster.Nodes) == 0 {
		return w, errors.New("no nodes to replay on: import an inventory (tuner import -nodes) or pass -nodes")
	}
	if len(w.Jobs) < 10 {
		return w, fmt.Errorf("only %d jobs to replay: not enough history to tune on", len(w.Jobs))
	}
	return w, nil
}

// WithStartLatency is base with the start latency and its spread estimated
// from the stored history src names (tuner.StartLatency and
// tuner.StartLatencies), which w was loaded from (Load), the jobs having run
// under p: how long after its placement the control plane started a job
// that had room. base as it is when w was read from a jobs file rather than
// the store: a trace records its own starts.
func WithStartLatency(ctx context.Context, s *store.Store, src tuner.Source, w tuner.Workload, base sim.Config, p scoring.Params) (sim.Config, error) {
	if s == nil || src.JobsFile != "" {
		return base, nil
	}
	hist, err := History(ctx, s, src)
	if err != nil {
		return base, err
	}
	median, err := tuner.StartLatency(ctx, hist, w, base, p)
	if err != nil {
		return base, err
	}
	spread, err := tuner.StartLatencies(ctx, hist, w, base, p)
	if err != nil {
		return base, err
	}
	base.StartLatency, base.StartLatencySpread = median, spread
	return base, nil
}

// History is the stored jobs src names: created in [From, To), of
// Namespace when it is set.
func History(ctx context.Context, s *store.Store, src tuner.Source) ([]schedloop.Job, error) {
	hist, err := s.JobHistory(ctx, src.From, src.To)
	if err != nil {
		return nil, err
	}
	if src.Namespace == "" {
		return hist, nil
	}
	kept := hist[:0]
	for _, j := range hist {
		if j.Namespace == src.Namespace {
			kept = append(kept, j)
		}
	}
	return kept, nil
}

// Record stores rep's proposal with its evidence and prediction, as a child
// of parentID (0: none): proposed when the guardrails accept it, rejected
// otherwise. A non-empty override records it as proposed anyway, with
// override's words before the guardrails' reason.
func (l *Lifecycle) Record(ctx context.Context, rep tuner.Report, parentID int64, override string) (schedloop.Profile, error) {
	p := rep.Proposed.ToDomain()
	p.ParentID, p.Reason, p.Predicted = parentID, rep.Decision.Reason, rep.Predicted()
	switch {
	case rep.Decision.Publish:
		p.Status = schedloop.ProfileProposed
	case override != "":
		p.Status, p.Reason = schedloop.ProfileProposed, override+": "+rep.Decision.Reason
	default:
		p.Status = schedloop.ProfileRejected
	}
	var err error
	if p.Evidence, err = rep.Evidence(); err != nil {
		return p, err
	}
	if p.ID, err = l.Store.InsertProfile(ctx, p); err != nil {
		return p, err
	}
	l.say("stored profile %s (id %d, %s); check it with: %s", p.Name, p.ID, p.Status, rep.VerifyCommand())
	return p, nil
}

// Publish marks the stored profile p applied at now and hands it to the
// scheduler.
func (l *Lifecycle) Publish(ctx context.Context, p schedloop.Profile, now time.Time) error {
	if err := l.Store.ApplyProfile(ctx, p.ID, now); err != nil {
		return err
	}
	return l.publish(ctx, p)
}

func (l *Lifecycle) publish(ctx context.Context, p schedloop.Profile) error {
	if l.Publisher == nil {
		return nil
	}
	// The evidence carries the predictor table the profile was tuned with.
	var table *predict.Table
	var ann map[string]string
	if len(p.Evidence) > 0 {
		rep, err := tuner.ReportFromEvidence(p.Evidence)
		if err != nil {
			return err
		}
		ann, table = rep.Annotations(), rep.Predictor
	}
	note, err := l.Publisher.Publish(ctx, profile.FromDomain(p), table, ann)
	if err != nil {
		return err
	}
	if note != "" {
		l.say("%s: %s", p.Name, note)
	}
	l.say("published %s to the scheduler", p.Name)
	return nil
}

// Measure is the outcome the cluster had in [from, to), and how many of
// the jobs stored for it finished.
func Measure(ctx context.Context, s *store.Store, from, to time.Time, highPriority int32) (tuner.Values, int, error) {
	jobs, err := s.JobHistory(ctx, from, to)
	if err != nil {
		return nil, 0, err
	}
	finished := 0
	for _, j := range jobs {
		if !j.Finished.IsZero() {
			finished++
		}
	}
	v := tuner.MeasureJobs(jobs, highPriority)
	idle, err := s.GPUIdleBreakdown(ctx, from, to)
	if err != nil {
		return nil, 0, err
	}
	if idle.Total() > 0 {
		v[tuner.MetricGPUIdle] = idle.IdleShare()
	}
	return v, finished, nil
}

// CheckApplied measures the applied profile against as long a time before
// it, records the measurement beside the prediction, and rolls back to the
// parent profile when the guardrails say it regressed. It reports whether
// the caller may tune: not while the applied profile has run for less than
// measureAfter, nor in the pass that rolled one back, since a new profile
// published then would replace the one being judged before its outcome is
// measured.
func (l *Lifecycle) CheckApplied(ctx context.Context, o tuner.Objective, g tuner.Guardrails, highPriority int32,
	now time.Time, measureAfter time.Duration) (settled bool, err error) {
	s := l.Store
	p, err := s.AppliedProfile(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return true, nil
	case err != nil:
		return false, err
	case p.Applied.IsZero():
		return true, nil
	case now.Sub(p.Applied) < measureAfter:
		l.say("profile %s: applied %s ago, measured after %s; not tuning until then",
			p.Name, now.Sub(p.Applied).Round(time.Second), measureAfter)
		return false, nil
	}
	window := now.Sub(p.Applied)
	after, finishedAfter, err := Measure(ctx, s, p.Applied, now, highPriority)
	if err != nil {
		return false, err
	}
	before, _, err := Measure(ctx, s, p.Applied.Add(-window), p.Applied, highPriority)
	if err != nil {
		return false, err
	}
	if finishedAfter == 0 {
		// JCT of no jobs reads as zero: judging now would call an idle
		// week a 100% improvement.
		l.say("profile %s: no job has finished in the %s since it was applied; not judged or tuned until one does",
			p.Name, window.Round(time.Second))
		return false, nil
	}
	v := g.Check(o, after, before)
	rec := map[string]float64{"regression": v.Regression, "window_s": window.Seconds()}
	for m, x := range after {
		rec[string(m)] = x
	}
	for m, x := range before {
		rec["before_"+string(m)] = x
	}
	if err := s.RecordMeasured(ctx, p.ID, rec); err != nil {
		return false, err
	}
	l.say("profile %s: %s", p.Name, v.Reason)
	if !v.Rollback || p.ParentID == 0 {
		return true, nil
	}
	parent, err := s.GetProfile(ctx, p.ParentID)
	if err != nil {
		return false, err
	}
	if err := s.ApplyProfile(ctx, parent.ID, now); err != nil {
		return false, err
	}
	if err := s.SetProfileStatus(ctx, p.ID, schedloop.ProfileRolledBack, v.Reason); err != nil {
		return false, err
	}
	if err := l.publish(ctx, parent); err != nil {
		return false, err
	}
	l.say("rolled back %s to %s", p.Name, parent.Name)
	return false, nil
}
