package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
	"github.com/schedloop/schedloop/internal/tuner"
)

func runFGDTable(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tuner fgd-table", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("trace-dir", filepath.Join("..", "shared", "traces", "alibaba-gpu-2023"),
		"folder holding the Alibaba openb CSVs (openb_node_list_gpu_node.csv, openb_pod_list_<trace>.csv)")
	traces := fs.String("traces", "default", "comma-separated openb pod lists to run (default, gpushare40, multigpu20, ...)")
	seeds := fs.String("seeds", "42-51", "shuffle seeds: a range a-b or a comma list (the paper used 42-51)")
	policies := fs.String("policies", "fgd,bestfit,packing,dotprod,random", "comma-separated policies")
	workers := fs.Int("workers", 0, "parallel runs (0: one per CPU)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	if err := fs.Parse(args); err != nil {
		return err
	}
	seedList, err := parseSeeds(*seeds)
	if err != nil {
		return fmt.Errorf("flag -seeds: %w", err)
	}
	var pols []scoring.Policy
	for _, p := range strings.Split(*policies, ",") {
		pol, err := scoring.ParsePolicy(strings.TrimSpace(p))
		if err != nil {
			return fmt.Errorf("flag -policies: %w", err)
		}
		pols = append(pols, pol)
	}
	if *workers < 0 {
		return fmt.Errorf("flag -workers: %d is negative", *workers)
	}
	nodesPath := filepath.Join(*dir, "openb_node_list_gpu_node.csv")
	if _, err := os.Stat(nodesPath); err != nil {
		return fmt.Errorf("flag -trace-dir: %s is missing: the FGD table needs the Alibaba openb trace (see ../shared/traces/README.md)", nodesPath)
	}
	inv, err := trace.LoadInventory(nodesPath, trace.FormatOpenb, nil, nil)
	if err != nil {
		return err
	}
	c := sim.NewCluster(inv)
	var rows []tuner.FGDRow
	start := time.Now()
	for _, name := range strings.Split(*traces, ",") {
		name = strings.TrimSpace(name)
		tj, err := trace.LoadJobs(filepath.Join(*dir, "openb_pod_list_"+name+".csv"), trace.FormatOpenb)
		if err != nil {
			return fmt.Errorf("flag -traces: %w", err)
		}
		var bar *progressBar
		if !*quiet {
			bar = newProgress(stderr, "fgd "+name, time.Now)
		}
		r, err := tuner.FGDExperiment(ctx, c, sim.JobsFromTrace(tj), name, pols, seedList, *workers,
			func(done, total int) { bar.update(done, total, "runs") })
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	fmt.Fprintf(stdout, "FGD experiment on %d GPU nodes (%d GPUs), %d seeds, %s\n\n", len(c.Nodes), c.GPUMilli()/1000,
		len(seedList), time.Since(start).Round(100*time.Millisecond))
	return tuner.WriteFGDTable(stdout, rows)
}

func parseSeeds(s string) ([]int64, error) {
	if a, b, ok := strings.Cut(s, "-"); ok && !strings.Contains(s, ",") {
		lo, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
		hi, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
		if err1 != nil || err2 != nil || hi < lo || hi-lo > 1000 {
			return nil, fmt.Errorf("%q is not a range like 42-51", s)
		}
		var out []int64
		for v := lo; v <= hi; v++ {
			out = append(out, v)
		}
		return out, nil
	}
	var out []int64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a seed", p)
		}
		out = append(out, v)
	}
	return out, nil
}
