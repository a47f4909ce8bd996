package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/tuner"
	"github.com/schedloop/schedloop/internal/tuner/publish"
)

func publishConfigMap(ctx context.Context, kube kubernetes.Interface, f *tuneFlags, d profile.Document) error {
	return publish.ConfigMap(ctx, kube, f.namespace, f.configMap, d)
}

// loopClock is the loop's time: the real clock in the command, a driven one
// in tests. after is the wait between passes.
type loopClock struct {
	now   func() time.Time
	after func(time.Duration) <-chan time.Time
}

func runLoop(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return loop(ctx, args, getenv, stdout, stderr, loopClock{now: time.Now, after: time.After}, publish.Election{})
}

// loop is "tuner loop" with its clock and the Lease timings (zero: the
// defaults) given.
func loop(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, clock loopClock,
	election publish.Election) error {
	fs := flag.NewFlagSet("tuner loop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := registerTuneFlags(fs, getenv)
	interval := fs.Duration("interval", 6*time.Hour, "time between tuning passes")
	measureAfter := fs.Duration("measure-after", 24*time.Hour, "how long an applied profile runs before its outcome is measured (and it may be rolled back); no new profile is tuned before then")
	lease := fs.String("lease", "schedloop-tuner", "name of the Lease that elects the one active tuner")
	leaseNS := fs.String("lease-namespace", "", "namespace of the Lease (default: -namespace)")
	host, _ := os.Hostname()
	identity := fs.String("identity", host, "this replica's identity in the Lease (default: the host name)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o, g, err := f.validate()
	if err != nil {
		return err
	}
	switch {
	case *interval <= 0:
		return fmt.Errorf("flag -interval: %v must be positive", *interval)
	case *measureAfter <= 0:
		return fmt.Errorf("flag -measure-after: %v must be positive", *measureAfter)
	case f.kubeconfig == "":
		return errors.New("flag -kubeconfig: the loop publishes ConfigMaps and elects a leader, so it needs a cluster")
	}
	if *leaseNS == "" {
		*leaseNS = f.namespace
	}
	s, err := f.db.Open(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	kube, err := f.kubeClient()
	if err != nil {
		return err
	}
	f.quiet = true // a service logs lines, not progress bars
	election.Namespace, election.Lease, election.Identity = *leaseNS, *lease, *identity
	return publish.LeaderElected(ctx, kube, election,
		func(ctx context.Context) {
			for {
				now := clock.now()
				settled, err := checkApplied(ctx, s, kube, f, o, g, now, *measureAfter, stdout)
				if err != nil && ctx.Err() == nil {
					fmt.Fprintln(stderr, "tuner loop: check applied profile:", err)
				}
				if settled {
					if _, err := tuneOnce(ctx, f, o, g, s, kube, now, stdout, stderr); err != nil && ctx.Err() == nil {
						fmt.Fprintln(stderr, "tuner loop: tune:", err)
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-clock.after(*interval):
				}
			}
		})
}

// measure is the outcome the cluster actually had in [from, to), and how
// many of the jobs stored for it finished.
func measure(ctx context.Context, s *store.Store, from, to time.Time, highPriority int32) (tuner.Values, int, error) {
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

// checkApplied measures the applied profile against as long a time before
// it, records the measurement beside the prediction, and rolls back to the
// parent profile when the guardrails say it regressed. It reports whether the
// pass may tune: not while the applied profile has run for less than
// measureAfter, nor in the pass that rolled one back, since a new profile
// published then would replace the one being judged before its outcome is
// measured.
func checkApplied(ctx context.Context, s *store.Store, kube kubernetes.Interface, f *tuneFlags, o tuner.Objective,
	g tuner.Guardrails, now time.Time, measureAfter time.Duration, stdout io.Writer) (settled bool, err error) {
	p, err := s.AppliedProfile(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return true, nil
	case err != nil:
		return false, err
	case p.Applied.IsZero():
		return true, nil
	case now.Sub(p.Applied) < measureAfter:
		fmt.Fprintf(stdout, "profile %s: applied %s ago, measured after %s; not tuning until then\n",
			p.Name, now.Sub(p.Applied).Round(time.Second), measureAfter)
		return false, nil
	}
	window := now.Sub(p.Applied)
	after, finishedAfter, err := measure(ctx, s, p.Applied, now, int32(f.highPriority))
	if err != nil {
		return false, err
	}
	before, _, err := measure(ctx, s, p.Applied.Add(-window), p.Applied, int32(f.highPriority))
	if err != nil {
		return false, err
	}
	if finishedAfter == 0 {
		// JCT of no jobs reads as zero: judging now would call an idle
		// week a 100% improvement.
		fmt.Fprintf(stdout, "profile %s: no job has finished in the %s since it was applied; not judged or tuned until one does\n",
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
	fmt.Fprintf(stdout, "profile %s: %s\n", p.Name, v.Reason)
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
	if kube != nil {
		if err := publishConfigMap(ctx, kube, f, profile.FromDomain(parent)); err != nil {
			return false, err
		}
	}
	fmt.Fprintf(stdout, "rolled back %s to %s\n", p.Name, parent.Name)
	return false, nil
}
