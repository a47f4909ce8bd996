package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schedloop/schedloop/internal/trace"
	"github.com/schedloop/schedloop/internal/tuner"
)

// HighPriority is the priority given to the jobs the seeded rule picks
// (tuner.IsHighPriority with -high-priority-seed); jobs at or above it are
// the critical jobs of the summary.
const HighPriority = 1

// loadWorkload reads the trace and cuts the slice both phases replay:
//   - jobs sorted by arrival; the first -skip left out, the next -jobs kept;
//   - arrivals shifted to start at zero, any gap between consecutive
//     arrivals longer than -max-gap shortened to it, and every gap then
//     divided by -compress;
//   - run times capped at -max-duration;
//   - the jobs tuner.IsHighPriority picks by -high-priority-seed and their
//     trace name at priority HighPriority (about one in ten).
//
// Queues (Philly's virtual clusters), sizes and the rest are the trace's.
func loadWorkload(c config) ([]trace.Job, error) {
	all, err := loadTrace(c)
	if err != nil {
		return nil, err
	}
	return sliceJobs(all, c)
}

// loadTrace reads -trace whole.
func loadTrace(c config) ([]trace.Job, error) {
	if _, err := os.Stat(c.tracePath); err != nil {
		hint := ""
		if c.tracePath == DefaultTrace {
			hint = " (run the demo from the repository root, or pass -trace)"
		}
		return nil, fmt.Errorf("flag -trace: %w%s", err, hint)
	}
	all, err := trace.LoadJobs(c.tracePath, trace.Format(c.format))
	if err != nil {
		return nil, fmt.Errorf("flag -trace: %w", err)
	}
	return all, nil
}

// sliceJobs cuts the slice from all (which it sorts by arrival in place).
func sliceJobs(all []trace.Job, c config) ([]trace.Job, error) {
	trace.SortByArrival(all)
	if c.skip+c.jobs > len(all) {
		return nil, fmt.Errorf("flags -skip/-jobs: %d+%d jobs asked for, the trace has %d", c.skip, c.jobs, len(all))
	}
	jobs := append([]trace.Job(nil), all[c.skip:c.skip+c.jobs]...)
	prev := jobs[0].Arrival
	var at time.Duration
	for i := range jobs {
		gap := jobs[i].Arrival - prev
		prev = jobs[i].Arrival
		at += time.Duration(float64(min(gap, c.maxGap)) / c.compress)
		jobs[i].Arrival = at
		jobs[i].Duration = min(jobs[i].Duration, c.maxDur)
		if tuner.IsHighPriority(c.highSeed, jobs[i].Name) {
			jobs[i].Priority = HighPriority
		}
	}
	return jobs, nil
}

// inventory is -nodes generated machines of -gpus-per-node GPUs, labelled
// with the default topology levels.
func inventory(c config) (trace.Inventory, error) {
	var fanout []int
	for _, f := range strings.Split(c.fanout, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return trace.Inventory{}, fmt.Errorf("flag -fanout: %q is not a positive integer", f)
		}
		fanout = append(fanout, v)
	}
	nodes := make([]trace.Node, c.nodes)
	for i := range nodes {
		nodes[i] = trace.Node{Name: fmt.Sprintf("gpu-%03d", i), GPUs: c.gpus, GPUModel: "NVIDIA-H100-80GB-HBM3"}
	}
	if err := trace.AssignTopology(nodes, "dc", trace.DefaultLevels, fanout); err != nil {
		return trace.Inventory{}, fmt.Errorf("flag -fanout: %w", err)
	}
	return trace.Inventory{Levels: trace.DefaultLevels, Nodes: nodes}, nil
}
