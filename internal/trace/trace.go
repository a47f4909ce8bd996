// Package trace holds the workload and inventory specs that drive the local
// cluster harness and the tuner's simulator, and the parsers that read them
// from public traces (Alibaba openb, Microsoft Philly) and from schedloop's own
// job and inventory formats.
//
// It is pure data: no Kubernetes client, no clock, no I/O beyond the readers
// handed to it.
package trace

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/schedloop/schedloop"
)

// Outcome is how a job's pods end once their duration has elapsed.
type Outcome string

const (
	Succeeded Outcome = "Succeeded"
	Failed    Outcome = "Failed"
)

// DefaultUtil is the GPU utilization given to jobs whose source records none.
const DefaultUtil = 0.85

// Job is one unit of work: a gang of Members identical pods that must run
// together, each holding GPUs GPUs for Duration once the gang is running.
type Job struct {
	Name      string
	Arrival   time.Duration // submit time, from the start of the trace
	Duration  time.Duration // run time of each member
	Members   int           // gang size, at least 1
	GPUs      int           // nvidia.com/gpu per member
	GPUMilli  int           // share of one GPU asked for by a GPU-sharing pod (1..1000); 0 when GPUs are whole
	CPUMilli  int64         // CPU request per member; 0 = none
	MemoryMiB int64         // memory request per member; 0 = none
	GPUModels []string      // allowed GPU models (node label values); empty = any
	Priority  int32
	Queue     string
	Util      float64 // GPU utilization while running, 0..1; 0 is a job that holds GPUs and stays idle
	Outcome   Outcome
	// MIG counts the MIG instances each member asks for, by resource name
	// (nvidia.com/mig-1g.10gb -> 1), as Node.MIG names them; nil asks for
	// none. They add to GPUs rather than replace them.
	MIG map[string]int `json:",omitempty"`
	// NonPreemptible marks a job preemption never evicts (inference
	// serving). The trace formats carry no such column; generated
	// workloads set it, and the player labels its pods with it.
	NonPreemptible bool `json:",omitempty"`
}

// Validate reports the first field of j that is out of range.
func (j Job) Validate() error {
	if err := checkText("name", j.Name); err != nil {
		return err
	}
	if err := checkText("queue", j.Queue); err != nil {
		return fmt.Errorf("job %s: %w", j.Name, err)
	}
	for _, m := range j.GPUModels {
		if err := checkText("gpu_models", m); err != nil {
			return fmt.Errorf("job %s: %w", j.Name, err)
		}
	}
	switch {
	case j.Name == "":
		return fmt.Errorf("field name: empty")
	case j.Arrival < 0:
		return fmt.Errorf("job %s: field arrival: %v is negative", j.Name, j.Arrival)
	case j.Duration < 0:
		return fmt.Errorf("job %s: field duration: %v is negative", j.Name, j.Duration)
	case j.Members < 1:
		return fmt.Errorf("job %s: field gang_size: %d is below 1", j.Name, j.Members)
	case j.Members > schedloop.MaxGangMembers:
		return fmt.Errorf("job %s: field gang_size: %d is above %d", j.Name, j.Members, schedloop.MaxGangMembers)
	case j.GPUs < 0 || j.GPUs > MaxGPUsPerMember:
		return fmt.Errorf("job %s: field gpus: %d is outside 0..%d", j.Name, j.GPUs, MaxGPUsPerMember)
	case j.GPUMilli < 0 || j.GPUMilli > 1000:
		return fmt.Errorf("job %s: field gpu_milli: %d is outside 0..1000", j.Name, j.GPUMilli)
	case j.CPUMilli < 0:
		return fmt.Errorf("job %s: field cpu_milli: %d is negative", j.Name, j.CPUMilli)
	case j.MemoryMiB < 0:
		return fmt.Errorf("job %s: field memory_mib: %d is negative", j.Name, j.MemoryMiB)
	case !(j.Util >= 0 && j.Util <= 1):
		return fmt.Errorf("job %s: field util: %v is outside 0..1", j.Name, j.Util)
	case j.Outcome != Succeeded && j.Outcome != Failed:
		return fmt.Errorf("job %s: field outcome: %q is not %s or %s", j.Name, j.Outcome, Succeeded, Failed)
	}
	for _, r := range slices.Sorted(maps.Keys(j.MIG)) {
		profile, ok := strings.CutPrefix(r, schedloop.MIGResourcePrefix)
		switch _, err := schedloop.MIGProfileSlices(profile); {
		case !ok:
			return fmt.Errorf("job %s: field mig[%s]: not a %s<profile> resource", j.Name, r, schedloop.MIGResourcePrefix)
		case err != nil:
			return fmt.Errorf("job %s: field mig[%s]: %w", j.Name, r, err)
		case j.MIG[r] < 0:
			return fmt.Errorf("job %s: field mig[%s]: %d is negative", j.Name, r, j.MIG[r])
		case j.MIG[r] > MaxMIGPerMember:
			return fmt.Errorf("job %s: field mig[%s]: %d is above %d", j.Name, r, j.MIG[r], MaxMIGPerMember)
		}
	}
	return nil
}

// MIGProfiles is counts keyed by MIG profile instead of resource name
// (nvidia.com/mig-1g.10gb -> 1g.10gb), for a node's or a job's MIG field;
// a name without the prefix is dropped, as no MIG instance answers to it.
func MIGProfiles(counts map[string]int) map[string]int {
	var out map[string]int
	for r, c := range counts {
		if p, ok := strings.CutPrefix(r, schedloop.MIGResourcePrefix); ok {
			if out == nil {
				out = map[string]int{}
			}
			out[p] = c
		}
	}
	return out
}

// TotalGPUs is the number of whole GPUs the job holds while it runs.
func (j Job) TotalGPUs() int { return j.Members * j.GPUs }

// SortByArrival orders jobs by arrival time, keeping file order among equals.
func SortByArrival(jobs []Job) {
	slices.SortStableFunc(jobs, func(a, b Job) int {
		switch {
		case a.Arrival < b.Arrival:
			return -1
		case a.Arrival > b.Arrival:
			return 1
		}
		return 0
	})
}

// Node is one GPU machine of an inventory.
type Node struct {
	Name         string
	GPUs         int
	GPUModel     string
	GPUMemoryMiB int64 // per GPU; 0 = unknown
	CPUMilli     int64
	MemoryMiB    int64
	MIG          map[string]int    // MIG resource name (nvidia.com/mig-1g.10gb) -> count
	Labels       map[string]string // topology and other node labels
}

// Validate reports the first field of n that is out of range.
func (n Node) Validate() error {
	switch {
	case n.Name == "":
		return fmt.Errorf("field name: empty")
	case n.GPUs < 0:
		return fmt.Errorf("node %s: field gpus: %d is negative", n.Name, n.GPUs)
	case n.CPUMilli < 0:
		return fmt.Errorf("node %s: field cpu_milli: %d is negative", n.Name, n.CPUMilli)
	case n.MemoryMiB < 0:
		return fmt.Errorf("node %s: field memory_mib: %d is negative", n.Name, n.MemoryMiB)
	case n.GPUMemoryMiB < 0:
		return fmt.Errorf("node %s: field gpu_memory_mib: %d is negative", n.Name, n.GPUMemoryMiB)
	}
	for r, c := range n.MIG {
		if c < 0 {
			return fmt.Errorf("node %s: field mig[%s]: %d is negative", n.Name, r, c)
		}
	}
	return nil
}
