package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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
	traces := fs.String("traces", "all", "comma-separated openb pod lists to run (default, gpushare40, multigpu20, ...); all: every openb_pod_list_*.csv in -trace-dir")
	expected := fs.String("expected", filepath.Join("..", "shared", "traces", "fgd-expected-results"),
		"folder holding the FGD artifact's per-run results (analysis_allo_discrete.csv, analysis_frag_discrete.csv), printed beside ours; missing: our figures only")
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
	names, err := podLists(*dir, *traces)
	if err != nil {
		return err
	}
	paper, err := readPaper(*expected)
	if err != nil {
		return err
	}
	if paper == nil {
		fmt.Fprintf(stdout, "no paper figures: %s lacks analysis_allo_discrete.csv (see ../shared/traces/README.md)\n", *expected)
	}
	var rows []tuner.FGDRow
	start := time.Now()
	for _, name := range names {
		tj, err := trace.LoadOpenbShapes(filepath.Join(*dir, "openb_pod_list_"+name+".csv"))
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
	fmt.Fprintf(stdout, "FGD experiment on %d GPU nodes (%d GPUs), %d pod lists, %d seeds, %s\n\n", len(c.Nodes), c.GPUMilli()/1000,
		len(names), len(seedList), time.Since(start).Round(100*time.Millisecond))
	return tuner.WriteFGDTable(stdout, rows, paper)
}

// podLists names the pod lists to run: the -traces list, or with "all"
// every openb_pod_list_*.csv in dir, default first and then by name.
func podLists(dir, traces string) ([]string, error) {
	if traces != "all" {
		var out []string
		for _, n := range strings.Split(traces, ",") {
			out = append(out, strings.TrimSpace(n))
		}
		return out, nil
	}
	files, err := filepath.Glob(filepath.Join(dir, "openb_pod_list_*.csv"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "openb_pod_list_"), ".csv"))
	}
	slices.SortStableFunc(out, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == "default":
			return -1
		case b == "default":
			return 1
		}
		return strings.Compare(a, b)
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("flag -trace-dir: no openb_pod_list_*.csv in %s", dir)
	}
	return out, nil
}

// readPaper reads the artifact's results from dir; nil when they are not
// there.
func readPaper(dir string) (tuner.Paper, error) {
	read := func(name string) ([]trace.FGDResult, error) {
		path := filepath.Join(dir, name)
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		res, err := trace.ReadFGDResults(bufio.NewReader(f))
		if err != nil {
			return nil, fmt.Errorf("flag -expected: %s: %w", path, err)
		}
		return res, nil
	}
	allo, err := read("analysis_allo_discrete.csv")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	frag, err := read("analysis_frag_discrete.csv")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return tuner.PaperFromResults(allo, frag), nil
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
