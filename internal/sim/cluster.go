package sim

import (
	"slices"
	"strings"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/trace"
)

// Cluster is the simulated inventory: nodes ordered by name (the order the
// tie-break rule uses) and the number of topology levels above the host that
// their Domains carry.
type Cluster struct {
	Nodes []*scoring.Node
	Depth int
}

// NewCluster builds a cluster from an inventory. The host level (the last of
// inv.Levels) is implicit in scoring's topology, so Domains hold the levels
// above it, read by scoring.NodeDomains as the scheduler reads them: a node
// missing a level's label belongs to no domain from that level down.
func NewCluster(inv trace.Inventory) *Cluster {
	levels := inv.Levels
	if n := len(levels); n > 0 && levels[n-1] == trace.LabelHostname {
		levels = levels[:n-1]
	}
	c := &Cluster{Depth: len(levels)}
	for _, tn := range inv.Nodes {
		domains := scoring.NodeDomains(levels, func(key string) string { return tn.Labels[key] })
		n := scoring.NewNode(tn.Name, tn.GPUModel, tn.GPUs, tn.CPUMilli, tn.MemoryMiB, domains...)
		n.MIGCap, n.MIGFree = trace.MIGProfiles(tn.MIG), trace.MIGProfiles(tn.MIG)
		c.Nodes = append(c.Nodes, n)
	}
	slices.SortStableFunc(c.Nodes, func(a, b *scoring.Node) int { return strings.Compare(a.Name, b.Name) })
	return c
}

// Clone deep-copies the cluster so one replay cannot disturb another.
func (c *Cluster) Clone() *Cluster {
	out := &Cluster{Depth: c.Depth, Nodes: make([]*scoring.Node, len(c.Nodes))}
	for i, n := range c.Nodes {
		out.Nodes[i] = n.Clone()
	}
	return out
}

// GPUMilli is the cluster's GPU capacity in milli-GPU.
func (c *Cluster) GPUMilli() int64 {
	var s int64
	for _, n := range c.Nodes {
		s += int64(n.GPUCap()) * scoring.MilliPerGPU
	}
	return s
}

// Job is one unit of work to replay: Members identical pods that start
// together and each hold Request for Duration.
type Job struct {
	Name     string
	Arrival  time.Duration
	Duration time.Duration
	Members  int
	Request  scoring.Request
	Queue    string
	Priority int32
	// Util is the GPU utilisation while running (0..1): the rest of the
	// allocated GPU time counts as allocated but idle.
	Util float64
	// NonPreemptible marks a job preemption never evicts (inference
	// serving): live, pods labelled podspec.LabelPreemptible "false", which
	// the trace player sets for a trace job marked so.
	NonPreemptible bool
	// Warmup marks a job replayed only for the load it puts on the
	// cluster: it queues, runs and is preempted as any other, but Metrics
	// leave it out and count GPU time only from the first arrival of a job
	// that is not one. A held-out stretch of history replayed after the
	// jobs before it (tuner.Tune) starts as loaded as it really started,
	// not on an empty cluster, which in a contended window would hide the
	// backlog the stretch inherited. False: measured.
	Warmup bool
	// Predicted is the run time the scheduler expects, used when the
	// replay has no Predictor (zero: nothing is known).
	Predicted time.Duration
	// RunningOn, when set, makes this a job a snapshot found running: one
	// node name per member, where it holds Request from Arrival for
	// Duration (what remains of its run), placed before anything else
	// happens, outside queue order and admission, as the live cluster
	// already placed it. Its Arrival may be no later than the first
	// arrival of a job that is not running. Nil: the job arrives and
	// queues.
	RunningOn []string
	// Queued is how long a snapshot's pending job had already waited when
	// the replay starts: it is ordered, aged against the starvation bound
	// and considered for a reservation as if submitted that long before
	// Arrival, yet starts no earlier than Arrival. Zero: submitted at
	// Arrival.
	Queued time.Duration
	// quotaHeld is how long Kueue held the job for quota before it arrived
	// for placement (runBehindKueue): its wait and completion time count
	// from its submission to Kueue.
	quotaHeld time.Duration
}

// Submitted is when the job entered the queue, on the replay's clock.
func (j *Job) Submitted() time.Duration { return j.Arrival - j.Queued }

// DemandMilli is the milli-GPU the whole job counts for while it runs, in
// its queue and in the accounting: its devices and shares, and its MIG
// instances by their share of a GPU (scoring.Request.CountedMilli).
func (j Job) DemandMilli() int64 { return int64(j.Members) * j.Request.CountedMilli() }

// deviceMilli is the milli-GPU of whole devices and shares the job holds,
// without its MIG instances, which no node's devices (GPUFree) hold.
func (j Job) deviceMilli() int64 { return int64(j.Members) * j.Request.TotalGPUMilli() }

// JobsFromTrace converts trace jobs, keeping their order.
func JobsFromTrace(tj []trace.Job) []Job {
	out := make([]Job, len(tj))
	for i, j := range tj {
		out[i] = Job{Name: j.Name, Arrival: j.Arrival, Duration: j.Duration, Members: max(j.Members, 1),
			Request: RequestOf(j), Queue: j.Queue, Priority: j.Priority, Util: j.Util, NonPreemptible: j.NonPreemptible}
	}
	return out
}

// RequestOf is what one member of a trace job asks of a node.
func RequestOf(j trace.Job) scoring.Request {
	r := scoring.Request{CPUMilli: j.CPUMilli, MemoryMiB: j.MemoryMiB, GPUs: j.GPUs, GPUModels: j.GPUModels, MIG: trace.MIGProfiles(j.MIG)}
	if j.GPUs == 1 && j.GPUMilli > 0 && j.GPUMilli < scoring.MilliPerGPU {
		r.GPUMilli = j.GPUMilli
	}
	return r
}

// Requests lists every job's member request once per member, the sample the
// typical workload of fragmentation scoring is drawn from.
func Requests(jobs []Job) []scoring.Request {
	out := make([]scoring.Request, 0, len(jobs))
	for _, j := range jobs {
		for m := 0; m < j.Members; m++ {
			out = append(out, j.Request)
		}
	}
	return out
}
