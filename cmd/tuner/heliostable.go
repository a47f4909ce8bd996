package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/trace"
	"github.com/schedloop/schedloop/internal/tuner"
)

// heliosRows are the rows helios-table can run.
var heliosRows = []string{"fifo", "sjf", "default", "tuned", "hp"}

// highPriority is the priority the seeded rule gives one job in ten.
const highPriority = 100

func runHeliosTable(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tuner helios-table", flag.ContinueOnError)
	fs.SetOutput(stderr)
	traces := fs.String("trace-dir", filepath.Join("..", "shared", "traces"),
		"folder holding philly/pollux_philly.csv and helios-philly-results/philly_vc.csv")
	split := fs.String("split", "2017-11-01", "UTC date ending the training part of the window (tuned settings are chosen on jobs submitted before it)")
	seed := fs.Uint64("hp-seed", 1, "seed of the rule that marks one job in ten high priority")
	policies := fs.String("policies", "fifo,sjf,default,tuned,hp", "rows to run: fifo and sjf (Helios's, no backfill), default (schedloop's default profile), tuned (the best setting on the training part), hp (tuned, one job in ten high priority, with preemption)")
	workers := fs.Int("workers", 0, "VCs replayed at once (0: one per CPU)")
	load := fs.Float64("load", 1, "divide every arrival by this (1..100): the same jobs in less time; 1 is the published experiment")
	bench := fs.Bool("bench", false, "also print the headline numbers as BENCH lines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	splitAt, err := time.Parse("2006-01-02", *split)
	if err != nil || !splitAt.After(tuner.HeliosWindowStart) || !splitAt.Before(tuner.HeliosWindowEnd) {
		return fmt.Errorf("flag -split: %q is not a date inside the window %s .. %s", *split,
			tuner.HeliosWindowStart.Format("2006-01-02"), tuner.HeliosWindowEnd.Format("2006-01-02"))
	}
	if *workers < 0 {
		return fmt.Errorf("flag -workers: %d is negative", *workers)
	}
	w, vcs, err := loadHelios(*traces, splitAt, *load)
	if err != nil {
		return err
	}
	opt := predict.DefaultOptions()
	var rows []tuner.HeliosOutcome
	started := time.Now()
	want := map[string]bool{}
	for _, p := range strings.Split(*policies, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(heliosRows, p) {
			return fmt.Errorf("flag -policies: %q is not one of %s", p, strings.Join(heliosRows, ", "))
		}
		want[p] = true
	}
	runRow := func(p tuner.HeliosPolicy, hp int32) (tuner.HeliosOutcome, error) {
		t0 := time.Now()
		out, err := tuner.RunHelios(ctx, w, p, 0, hp, *workers)
		if err == nil {
			fmt.Fprintf(stderr, "helios: %s in %s\n", p.Name, time.Since(t0).Round(100*time.Millisecond))
		}
		return out, err
	}
	for _, p := range []tuner.HeliosPolicy{tuner.HeliosFIFO(), tuner.HeliosSJF()} {
		if !want[p.Name] {
			continue
		}
		out, err := runRow(p, 0)
		if err != nil {
			return err
		}
		rows = append(rows, out)
	}
	if want["default"] {
		out, err := runRow(tuner.SchedloopPolicy("schedloop default", tuner.HeliosSetting{}, opt), 0)
		if err != nil {
			return err
		}
		rows = append(rows, out)
	}
	var tuned tuner.HeliosSetting
	if want["tuned"] || want["hp"] {
		t0 := time.Now()
		var costs map[string]float64
		tuned, costs, err = tuner.TuneHelios(ctx, w, tuner.HeliosGrid(), tuner.Objective{tuner.MetricMeanJCT: 0.7, tuner.MetricP95JCT: 0.3}, opt, *workers)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "helios: tuning on %d settings in %s\n", len(costs), time.Since(t0).Round(100*time.Millisecond))
		for _, k := range tuner.SortedCosts(costs)[:min(5, len(costs))] {
			fmt.Fprintf(stderr, "  training cost %.3f  %s\n", costs[k], k)
		}
	}
	if want["tuned"] {
		out, err := runRow(tuner.SchedloopPolicy("schedloop tuned", tuned, opt), 0)
		if err != nil {
			return err
		}
		rows = append(rows, out)
	}
	var hpRow *tuner.HeliosOutcome
	if want["hp"] {
		p := tuner.SchedloopPolicy("schedloop tuned, 10% high priority", tuned, opt)
		p.Jobs = tuner.MarkHighPriority(*seed, highPriority)
		p.Preemption = true
		out, err := runRow(p, highPriority)
		if err != nil {
			return err
		}
		rows = append(rows, out)
		hpRow = &rows[len(rows)-1]
	}
	jobs := 0
	for _, js := range w.Jobs {
		jobs += len(js)
	}
	fmt.Fprintf(stdout, "Helios experiment on Philly: %d jobs, %d VCs, %s .. %s; training before %s; load x%g; %s\n",
		jobs, len(vcs), tuner.HeliosWindowStart.Format("2006-01-02"), tuner.HeliosWindowEnd.Format("2006-01-02"), *split,
		*load, time.Since(started).Round(time.Second))
	fmt.Fprintln(stdout, "note: pollux_philly.csv carries fewer jobs per VC than the trace Helios simulated (see ../shared/traces/philly/SOURCE.md),\n"+
		"      so its FIFO queues far less than the published FIFO; compare policies within a column, not across the two sources.")
	if want["tuned"] || want["hp"] {
		fmt.Fprintf(stdout, "tuned setting (chosen on the training part): %s\n", tuned)
	}
	fmt.Fprintf(stdout, "published: %s\n\n", tuner.HeliosSource)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tavg JCT (s)\tavg queue (s)\tpublished JCT\tpublished queue\theld-out JCT\theld-out queue\thp p95 wait (s)\tunfinished\t")
	for _, r := range rows {
		pub, pq := "", ""
		if v, ok := tuner.HeliosPublished[r.Policy]; ok {
			pub, pq = fmt.Sprintf("%.0f", v[0]), fmt.Sprintf("%.0f", v[1])
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%s\t%.0f\t%.0f\t%.0f\t%d\t\n", r.Policy, r.AvgJCT, r.AvgQueue, pub, pq,
			r.HeldOutJCT, r.HeldOutQueue, r.P95HighPriorityWait, r.Unfinished)
	}
	for _, k := range []string{"srtf", "qssf"} {
		v := tuner.HeliosPublished[k]
		fmt.Fprintf(tw, "%s (published only)\t\t\t%.0f\t%.0f\t\t\t\t\t\n", k, v[0], v[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if strings.HasPrefix(r.Policy, "schedloop") {
			fmt.Fprintf(stdout, "%s: run time predicted at submission from finished jobs only, held-out jobs: Spearman %.2f, %.0f%% within 2x\n",
				r.Policy, r.Prediction.Spearman, 100*r.Prediction.Within2x)
		}
	}
	if *bench {
		names := map[string]string{"fifo": "fifo", "sjf": "sjf", "schedloop tuned": "tuned"}
		for _, r := range rows {
			if n, ok := names[r.Policy]; ok {
				fmt.Fprintf(stdout, "BENCH helios_philly_%s_avg_jct_s %.0f s\n", n, r.AvgJCT)
				if n == "tuned" {
					fmt.Fprintf(stdout, "BENCH helios_philly_tuned_avg_queue_s %.0f s\n", r.AvgQueue)
				}
			}
		}
		if hpRow != nil {
			fmt.Fprintf(stdout, "BENCH helios_philly_hp_p95_wait_s %.0f s\n", hpRow.P95HighPriorityWait)
		}
	}
	return nil
}

// loadHelios reads the Philly trace and Helios's VC list from traces and
// selects the experiment's jobs.
func loadHelios(traces string, splitAt time.Time, load float64) (tuner.HeliosWorkload, []tuner.HeliosVC, error) {
	jobsPath := filepath.Join(traces, "philly", "pollux_philly.csv")
	vcPath := filepath.Join(traces, "helios-philly-results", "philly_vc.csv")
	open := func(p string) (*os.File, error) {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("flag -trace-dir: %s is missing: the Helios experiment needs the Philly trace and Helios's VC list (see ../shared/traces/README.md): %w", p, err)
		}
		return f, nil
	}
	f, err := open(vcPath)
	if err != nil {
		return tuner.HeliosWorkload{}, nil, err
	}
	vcs, err := tuner.ReadHeliosVCs(f)
	f.Close()
	if err != nil {
		return tuner.HeliosWorkload{}, nil, err
	}
	f, err = open(jobsPath)
	if err != nil {
		return tuner.HeliosWorkload{}, nil, err
	}
	tj, epoch, err := trace.ReadPhillyJobsEpoch(f)
	f.Close()
	if err != nil {
		return tuner.HeliosWorkload{}, nil, fmt.Errorf("%s: %w", jobsPath, err)
	}
	w, err := tuner.NewHeliosWorkload(tj, epoch, vcs, splitAt, load)
	if err != nil {
		return tuner.HeliosWorkload{}, nil, err
	}
	return w, vcs, err
}
