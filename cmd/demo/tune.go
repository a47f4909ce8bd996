package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/trace"
	"github.com/schedloop/schedloop/internal/tuner"
	"github.com/schedloop/schedloop/internal/tuner/lifecycle"
	"github.com/schedloop/schedloop/internal/tuner/publish"
)

// tuneResult is what the tuner decided and, when it published, the profile.
type tuneResult struct {
	report    tuner.Report
	profileID int64
	published bool
}

// loopTuneInput is the tuner's input as the loop's tuning step sets it
// (-knobs, -replays, -rounds, -margin, the later 30% of the jobs held out),
// jitter the replays' arrival jitter on the workload's time axis.
func loopTuneInput(c config, w tuner.Workload, current profile.Document, name string, jitter time.Duration, base sim.Config) tuner.Input {
	g := tuner.DefaultGuardrails()
	g.Margin = c.margin
	return tuner.Input{Workload: w, Current: current, Name: name, Objective: tuner.DefaultObjective(), Guard: g,
		Replays: tuner.Replays{Count: c.replays, Jitter: jitter}, HoldoutFraction: 0.3, Rounds: c.rounds, MinGain: 0.002,
		Knobs: c.knobs, Base: base}
}

// tuneOnce runs the tuner once, as `tuner run` does, on the jobs the
// collector stored in namespace since from (the first replay) and the nodes
// it saw since then, starting from the profile the first replay ran under.
// A proposal the guardrails accept (or any, with -publish=always) is
// stored, marked applied and published to the scheduler's profile
// ConfigMap.
func tuneOnce(ctx context.Context, c config, s *store.Store, kube kubernetes.Interface, namespace string, from time.Time,
	current profile.Document, say func(string, ...any)) (tuneResult, error) {
	now := time.Now()
	src := tuner.Source{From: from, To: now, Namespace: namespace, Util: trace.DefaultUtil, Levels: trace.DefaultLevels}
	w, err := lifecycle.Load(ctx, s, src)
	if err != nil {
		return tuneResult{}, err
	}
	base := sim.Config{Preemption: true, HighPriority: HighPriority}
	// The replays start each job as late as this control plane started
	// the jobs that had room (tuner.StartLatencies), so what they predict
	// is what this cluster, at this clock, will measure.
	if base, err = lifecycle.WithStartLatency(ctx, s, src, w, base, current.Params()); err != nil {
		return tuneResult{}, err
	}
	say("tuner: replaying %d stored jobs on %d stored nodes under candidate profiles, changing %s; each start one of %d stored waits of the jobs that had room after its placement (median %v)",
		len(w.Jobs), len(w.Cluster.Nodes), knobs(c.knobs), len(base.StartLatencySpread), base.StartLatency)
	name := "demo-tuned-" + now.UTC().Format("20060102-150405")
	// The history is in wall time, compressed by the replay speed, so the
	// arrival jitter is too. Seed 0: derived from the history.
	in := loopTuneInput(c, w, current, name, time.Duration(float64(10*time.Minute)/c.speed), base)
	in.Source = src
	rep, err := tuner.Tune(ctx, in)
	if err != nil {
		return tuneResult{}, fmt.Errorf("tune: %w", err)
	}
	res := tuneResult{report: rep}
	for _, ch := range rep.Changes {
		say("tuner:   %s", ch)
	}
	say("tuner: %d evaluations in %v, seed %d; %s", rep.Evaluations, seconds(rep.ElapsedS), rep.Inputs.Seed, rep.Decision.Reason)
	l := &lifecycle.Lifecycle{Store: s, Out: sayWriter(say),
		Publisher: publish.ConfigMapPublisher{Client: kube, Namespace: profileNamespace, Name: profile.DefaultConfigMapName}}
	override := ""
	if !rep.Decision.Publish && c.publish == publishAlways {
		// The guardrails said no; -publish=always overrides them so the
		// reload can be seen. The stored reason says so.
		override = "published by the demo (-publish=always) although the guardrails would not"
		say("tuner: the guardrails would not publish this (%s); -publish=always publishes it anyway", rep.Decision.Reason)
	}
	p, err := l.Record(ctx, rep, 0, override)
	if err != nil {
		return res, err
	}
	res.profileID = p.ID
	if !rep.Decision.Publish && override == "" {
		return res, nil
	}
	if err := l.Publish(ctx, p, now); err != nil {
		return res, err
	}
	res.published = true
	return res, nil
}

func knobs(k []tuner.Knob) string {
	if len(k) == 0 {
		return "every field"
	}
	return "only " + tuner.KnobList(k)
}

// sayWriter prints what the lifecycle reports as the demo's tuner lines.
type sayWriter func(string, ...any)

func (w sayWriter) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		w("tuner: %s", line)
	}
	return len(b), nil
}

// seconds prints a tuning time to the millisecond: a search over a
// hundred-job history takes tens of milliseconds, which %.1fs shows as 0.0s.
func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}
