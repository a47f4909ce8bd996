package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schedloop/schedloop/internal/tuner/publish"
)

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
	metricsAddr := fs.String("metrics-addr", "", "address to serve Prometheus /metrics on (runs, last run, leadership), e.g. :9102; empty: none")
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
	l := f.lifecycle(s, kube, stdout)
	m := newLoopMetrics()
	if *metricsAddr != "" {
		stop, err := m.serve(ctx, *metricsAddr, stderr)
		if err != nil {
			return err
		}
		defer stop()
	}
	election.Namespace, election.Lease, election.Identity = *leaseNS, *lease, *identity
	return publish.LeaderElected(ctx, kube, election,
		func(ctx context.Context) {
			m.leader.Set(1)
			defer m.leader.Set(0)
			for {
				now, began := clock.now(), time.Now()
				outcome := passWaiting
				settled, err := l.CheckApplied(ctx, o, g, int32(f.highPriority), now, *measureAfter)
				if err != nil && ctx.Err() == nil {
					fmt.Fprintln(stderr, "tuner loop: check applied profile:", err)
					outcome = passError
				}
				if settled {
					if _, err := tuneOnce(ctx, f, o, g, s, kube, now, stdout, stderr); err != nil && ctx.Err() == nil {
						fmt.Fprintln(stderr, "tuner loop: tune:", err)
						outcome = passError
					} else if outcome != passError {
						outcome = passTuned
					}
				}
				if ctx.Err() == nil { // a pass cut short by losing the Lease is no outcome
					m.pass(outcome, now, time.Since(began))
				}
				select {
				case <-ctx.Done():
					return
				case <-clock.after(*interval):
				}
			}
		})
}
