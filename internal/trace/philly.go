package trace

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// phillyTimeLayout is the submit-time format of pollux_philly.csv.
const phillyTimeLayout = "2006-01-02 15:04:05"

// PhillyGPUsPerNode is the machine size used to split large Philly jobs into gangs.
const PhillyGPUsPerNode = 8

// ReadPhillyJobs reads the Philly job list as published with Pollux
// (pollux_philly.csv: timestamp,duration,num_gpus,gpu_time,cluster).
//
// Rules for what the trace does not say directly:
//   - Arrival is the submit time minus the earliest submit time in the file.
//   - Jobs are named philly-NNNNNN after their row (1-based, header excluded).
//   - Queue is the virtual cluster (cluster column).
//   - A job of up to 8 GPUs is one member; a larger one is the fewest members
//     of at most 8 GPUs that divide it evenly (16 -> 2x8, 12 -> 2x6).
//   - Util is DefaultUtil; every job succeeds (the file has no final status).
func ReadPhillyJobs(r io.Reader) ([]Job, error) {
	jobs, _, err := ReadPhillyJobsEpoch(r)
	return jobs, err
}

// ReadPhillyJobsEpoch is ReadPhillyJobs that also returns the submit time
// Arrival counts from (the earliest in the file), for selecting jobs by
// calendar date as published experiments do.
func ReadPhillyJobsEpoch(r io.Reader) ([]Job, time.Time, error) {
	t, err := newTable(r, "timestamp", "duration", "num_gpus", "cluster")
	if err != nil {
		return nil, time.Time{}, err
	}
	var (
		jobs   []Job
		submit []time.Time
		first  time.Time
	)
	for row := 1; ; row++ {
		ok, err := t.next()
		if err != nil {
			return nil, time.Time{}, err
		}
		if !ok {
			break
		}
		ts, err := time.Parse(phillyTimeLayout, t.str("timestamp"))
		if err != nil {
			return nil, time.Time{}, t.errf("timestamp", "%q is not a time like %q", t.str("timestamp"), phillyTimeLayout)
		}
		dur, err := t.seconds("duration", 0)
		if err != nil {
			return nil, time.Time{}, err
		}
		n, err := t.intField("num_gpus", 0, 1<<16)
		if err != nil {
			return nil, time.Time{}, err
		}
		if n < 1 {
			return nil, time.Time{}, t.errf("num_gpus", "%d is below 1", n)
		}
		members, per := SplitGang(n, PhillyGPUsPerNode)
		if len(submit) == 0 || ts.Before(first) {
			first = ts
		}
		submit = append(submit, ts)
		jobs = append(jobs, Job{
			Name:     fmt.Sprintf("philly-%06d", row),
			Duration: secondsToDuration(dur),
			Members:  members,
			GPUs:     per,
			Queue:    t.str("cluster"),
			Util:     DefaultUtil,
			Outcome:  Succeeded,
		})
	}
	for i := range jobs {
		jobs[i].Arrival = submit[i].Sub(first)
	}
	return jobs, first, nil
}

// SplitGang splits a request for gpus GPUs into the fewest members of at
// most perNode GPUs each that divide it evenly.
func SplitGang(gpus, perNode int) (members, perMember int) {
	if gpus <= perNode || perNode < 1 {
		return 1, gpus
	}
	members = (gpus + perNode - 1) / perNode
	for gpus%members != 0 {
		members++
	}
	return members, gpus / members
}

// ReadPhillyMachines reads Philly's cluster_machine_list
// (machineId, number of GPUs, single GPU mem such as "12GB").
func ReadPhillyMachines(r io.Reader) ([]Node, error) {
	t, err := newTable(r, "machineid", "number of gpus", "single gpu mem")
	if err != nil {
		return nil, err
	}
	var nodes []Node
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nodes, nil
		}
		n := Node{Name: t.str("machineid")}
		if n.Name == "" {
			return nil, t.errf("machineId", "empty")
		}
		if n.GPUs, err = t.intField("number of gpus", 0, 1024); err != nil {
			return nil, err
		}
		mem := t.str("single gpu mem")
		gb, ok := strings.CutSuffix(strings.ToUpper(mem), "GB")
		v, perr := strconv.ParseInt(strings.TrimSpace(gb), 10, 32)
		if !ok || perr != nil || v < 0 {
			return nil, t.errf("single GPU mem", "%q is not a size like 12GB", mem)
		}
		n.GPUMemoryMiB = v * 1024
		n.GPUModel = fmt.Sprintf("philly-%dgb", v)
		nodes = append(nodes, n)
	}
}
