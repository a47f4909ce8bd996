package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/schedloop/schedloop/internal/eta"
	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/tuner"
)

func runETABacktest(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tuner eta-backtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	traces := fs.String("trace-dir", filepath.Join("..", "shared", "traces"),
		"folder holding philly/pollux_philly.csv and helios-philly-results/philly_vc.csv")
	load := fs.Float64("load", 1, "divide every arrival by this (1..100): the same jobs in less time; 1 is the published experiment")
	samples := fs.Int("samples", 400, "submissions asked about, drawn from the jobs that waited longer than -min-wait (0: all)")
	minWait := fs.Duration("min-wait", eta.DefaultMinWait, "only jobs that waited longer than this in the replay are asked about")
	runs := fs.Int("runs", eta.DefaultRuns, fmt.Sprintf("forward replays per estimate (1..%d)", eta.MaxRuns))
	seed := fs.Uint64("seed", 1, "seed of the sample of submissions and of the estimates' draws")
	workers := fs.Int("workers", 0, "VCs backtested at once (0: one per CPU)")
	bench := fs.Bool("bench", false, "also print the headline numbers as BENCH lines")
	policyName := fs.String("policy", "default", "the replay's policy: default (schedloop's default profile) or fifo (Helios's, no backfill)")
	window := fs.Duration("window", eta.DefaultWindow, "the submissions this long before each asked one are what its replays draw later submissions from (0: none, the snapshot's jobs alone)")
	each := fs.Bool("points", false, "print every submission asked about: actual wait, p10, p50, p90")
	byVC := fs.Bool("by-vc", false, "also print the error and coverage of each VC's submissions")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *samples < 0:
		return fmt.Errorf("flag -samples: %d is negative", *samples)
	case *minWait < 0:
		return fmt.Errorf("flag -min-wait: %v is negative", *minWait)
	case *runs < 1 || *runs > eta.MaxRuns:
		return fmt.Errorf("flag -runs: %d is outside 1..%d", *runs, eta.MaxRuns)
	case *workers < 0:
		return fmt.Errorf("flag -workers: %d is negative", *workers)
	case *window < 0:
		return fmt.Errorf("flag -window: %v is negative", *window)
	}
	// BacktestOptions' zero is the default window; the flag's zero is none.
	arrivals := *window
	if arrivals == 0 {
		arrivals = -1
	}
	// The split only matters to tuning, which the backtest does not do.
	w, vcs, err := loadHelios(*traces, tuner.HeliosWindowEnd.Add(-24*time.Hour), *load)
	if err != nil {
		return err
	}
	started := time.Now()
	var policy tuner.HeliosPolicy
	switch *policyName {
	case "default":
		policy = tuner.SchedloopPolicy("schedloop default", tuner.HeliosSetting{}, predict.DefaultOptions())
	case "fifo":
		// FIFO orders by arrival and needs no prediction, but the
		// estimates do: they read the online predictor's.
		policy = tuner.SchedloopPolicy("fifo", tuner.HeliosSetting{}, predict.DefaultOptions())
		inner := policy.Config
		policy.Config = func() (sim.Config, error) {
			c, err := inner()
			c.NoBackfill = true
			return c, err
		}
	default:
		return fmt.Errorf("flag -policy: %q is not default or fifo", *policyName)
	}
	points, err := tuner.HeliosETA(ctx, w, policy, eta.BacktestOptions{MinWait: *minWait, Samples: *samples, Seed: *seed,
		Forecast: eta.Options{Runs: *runs}, Window: arrivals}, *workers)
	if err != nil {
		return err
	}
	s := eta.Summarise(points)
	if *each {
		fmt.Fprintln(stdout, "job\tactual_s\tp10_s\tp50_s\tp90_s\tstate\thorizon_s")
		for _, p := range points {
			fmt.Fprintf(stdout, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%.0f\n", p.Job, p.Actual.Seconds(), p.P10.Seconds(), p.P50.Seconds(), p.P90.Seconds(), p.State, p.Horizon.Seconds())
		}
	}
	fmt.Fprintf(stdout, "wait estimates on the Helios experiment's window (%d VCs, load x%g), %s, run times predicted online: %d submissions of jobs that waited over %v, %d forward replays each, later submissions drawn from the last %v's; %s\n",
		len(vcs), *load, policy.Name, s.Points, *minWait, *runs, *window, time.Since(started).Round(time.Second))
	fmt.Fprintf(stdout, "median absolute error of the p50 estimate: %.1f%% of the actual wait\n", s.MedianAbsErrorPct)
	fmt.Fprintf(stdout, "actual starts inside the p10..p90 interval: %.2f\n", s.IntervalCoverage)
	fmt.Fprintf(stdout, "estimates whose p50 lay past the horizon later submissions are drawn to (a lower bound): %d\n", s.Censored)
	if *byVC {
		fmt.Fprintln(stdout, "vc\tpoints\tmedian_abs_error_pct\tinterval_coverage\tcensored")
		for _, vc := range vcs {
			vs := eta.Summarise(slices.DeleteFunc(slices.Clone(points), func(p eta.Point) bool { return p.Queue != vc.Name }))
			if vs.Points > 0 {
				fmt.Fprintf(stdout, "%s\t%d\t%.1f\t%.2f\t%d\n", vc.Name, vs.Points, vs.MedianAbsErrorPct, vs.IntervalCoverage, vs.Censored)
			}
		}
	}
	if *bench {
		fmt.Fprintf(stdout, "BENCH eta_median_abs_error_pct %.1f %%\n", s.MedianAbsErrorPct)
		fmt.Fprintf(stdout, "BENCH eta_interval_coverage %.2f ratio\n", s.IntervalCoverage)
	}
	return nil
}
