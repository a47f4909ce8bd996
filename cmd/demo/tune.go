package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/trace"
	"github.com/schedloop/schedloop/internal/tuner"
	"github.com/schedloop/schedloop/internal/tuner/publish"
)

// tuneResult is what the tuner decided and, when it published, the profile.
type tuneResult struct {
	report    tuner.Report
	profileID int64
	published bool
}

// tuneOnce runs the tuner once, as `tuner run` does, on the jobs the
// collector stored since from (the first replay) and the nodes it saw since
// then, starting from the profile the first replay ran under. A
// proposal the guardrails accept is stored, marked applied and published to
// the scheduler's profile ConfigMap.
func tuneOnce(ctx context.Context, c config, s *store.Store, kube kubernetes.Interface, namespace string, from time.Time,
	current profile.Document, say func(string, ...any)) (tuneResult, error) {
	now := time.Now()
	nodes, err := s.ListNodes(ctx)
	if err != nil {
		return tuneResult{}, err
	}
	seen := nodes[:0]
	for _, n := range nodes {
		if !n.LastSeen.Before(from) {
			seen = append(seen, n)
		}
	}
	hist, err := s.JobHistory(ctx, from, now)
	if err != nil {
		return tuneResult{}, err
	}
	phase := hist[:0]
	for _, j := range hist {
		if j.Namespace == namespace {
			phase = append(phase, j)
		}
	}
	w := tuner.Workload{Cluster: tuner.ClusterFromNodes(seen, trace.DefaultLevels),
		Jobs: tuner.JobsFromHistory(phase, from, now, trace.DefaultUtil)}
	say("tuner: replaying %d stored jobs on %d stored nodes under candidate profiles", len(w.Jobs), len(seen))
	g := tuner.DefaultGuardrails()
	g.Margin = c.margin
	name := "demo-tuned-" + now.UTC().Format("20060102-150405")
	rep, err := tuner.Tune(ctx, tuner.Input{Workload: w, Current: current, Name: name,
		Objective: tuner.DefaultObjective(), Guard: g,
		// The history is in wall time, compressed by the replay speed, so
		// the arrival jitter is too.
		Replays:         tuner.Replays{Count: c.replays, Jitter: time.Duration(float64(10*time.Minute) / c.speed), Seed: 1},
		HoldoutFraction: 0.3, Rounds: c.rounds, MinGain: 0.002,
		Base: sim.Config{Preemption: true, HighPriority: HighPriority},
	})
	if err != nil {
		return tuneResult{}, fmt.Errorf("tune: %w", err)
	}
	res := tuneResult{report: rep}
	for _, ch := range rep.Changes {
		say("tuner:   %s", ch)
	}
	say("tuner: %d evaluations in %.1fs; %s", rep.Evaluations, rep.ElapsedS, rep.Decision.Reason)
	p := rep.Proposed.ToDomain()
	p.Reason, p.Predicted = rep.Decision.Reason, rep.Predicted()
	publishIt := rep.Decision.Publish || c.publish == publishAlways
	switch {
	case rep.Decision.Publish:
		p.Status = schedloop.ProfileProposed
	case publishIt:
		// The guardrails said no; -publish=always overrides them so the
		// reload can be seen. The stored reason says so.
		p.Status = schedloop.ProfileProposed
		p.Reason = "published by the demo (-publish=always) although the guardrails would not: " + rep.Decision.Reason
		say("tuner: the guardrails would not publish this (%s); -publish=always publishes it anyway", rep.Decision.Reason)
	default:
		p.Status = schedloop.ProfileRejected
	}
	if p.Evidence, err = rep.Evidence(); err != nil {
		return res, err
	}
	if res.profileID, err = s.InsertProfile(ctx, p); err != nil {
		return res, err
	}
	if !publishIt {
		say("tuner: stored profile %s (id %d, %s); nothing published", p.Name, res.profileID, p.Status)
		return res, nil
	}
	if err := s.ApplyProfile(ctx, res.profileID, now); err != nil {
		return res, err
	}
	if err := publish.ConfigMap(ctx, kube, profileNamespace, profile.DefaultConfigMapName, rep.Proposed); err != nil {
		return res, err
	}
	res.published = true
	say("tuner: stored profile %s (id %d, applied) and published it to ConfigMap %s/%s",
		p.Name, res.profileID, profileNamespace, profile.DefaultConfigMapName)
	return res, nil
}
