package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/dbflags"
	"github.com/schedloop/schedloop/internal/trace"
	"github.com/schedloop/schedloop/internal/tuner"
)

func runImport(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tuner import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := dbflags.Register(fs, getenv)
	jobsPath := fs.String("jobs", "", "job file to import: openb pod list, Philly pollux_philly.csv, schedloop job CSV or YAML")
	nodesPath := fs.String("nodes", "", "inventory to import (optional): openb node list, Philly machine list or inventory YAML")
	format := fs.String("format", "", "format of -jobs and -nodes: openb, philly, csv, yaml; empty detects it")
	originFlag := fs.String("origin", "2026-01-01T00:00:00Z", "RFC 3339 time the trace's time 0 maps to")
	namespace := fs.String("namespace", "trace", "namespace given to imported jobs (job UIDs are namespace/name)")
	fanout := fs.String("fanout", "1,4,8", "topology fanout for CSV node lists: children per level above the host (spine, rack, NVLink domain)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *jobsPath == "" && *nodesPath == "" {
		return fmt.Errorf("flag -jobs: give a job file (and/or -nodes)")
	}
	origin, err := time.Parse(time.RFC3339, *originFlag)
	if err != nil {
		return fmt.Errorf("flag -origin: %q is not an RFC 3339 time", *originFlag)
	}
	fan, err := parseInts(*fanout)
	if err != nil {
		return fmt.Errorf("flag -fanout: %w", err)
	}
	// Both files are read and checked before anything is written, and then
	// written in one transaction: a bad row anywhere leaves the database as
	// it was.
	var inv trace.Inventory
	if *nodesPath != "" {
		if inv, err = trace.LoadInventory(*nodesPath, trace.Format(*format), nil, fan); err != nil {
			return fmt.Errorf("flag -nodes: %w", err)
		}
	}
	var rows []schedloop.Job
	if *jobsPath != "" {
		tj, err := trace.LoadJobs(*jobsPath, trace.Format(*format))
		if err != nil {
			return fmt.Errorf("flag -jobs: %w", err)
		}
		rows = tuner.JobsForImport(tj, origin, *namespace)
	}
	s, err := db.Open(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	var bar *progressBar
	if !*quiet && len(rows) > 0 {
		bar = newProgress(stderr, "import", time.Now)
	}
	var nodes []schedloop.Node
	if len(inv.Nodes) > 0 {
		nodes = tuner.NodesForImport(inv, origin)
	}
	added, err := s.ImportTrace(ctx, nodes, rows, func(sent int) { bar.update(sent, len(rows), "jobs") })
	if err != nil {
		return err
	}
	if *nodesPath != "" {
		fmt.Fprintf(stdout, "imported %d nodes from %s\n", len(inv.Nodes), *nodesPath)
	}
	if *jobsPath != "" {
		fmt.Fprintf(stdout, "imported %d jobs from %s (%d new, %d already stored)\n", len(rows), *jobsPath, added, int64(len(rows))-added)
	}
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		v, err := strconv.Atoi(p)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", p)
		}
		out = append(out, v)
	}
	return out, nil
}
