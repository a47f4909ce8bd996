package tuner

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"runtime/debug"
	"time"

	"github.com/schedloop/schedloop/internal/sim"
)

// Inputs names everything a report's figures were computed from, so that
// anyone holding the same history can replay it (tuner verify) and must get
// the same figures: the report is a pure function of these, the current
// profile and the program version.
type Inputs struct {
	// Seed drives every random draw of the replays and the search.
	Seed uint64 `json:"seed,string"` // a string: JSON numbers lose 64-bit integers
	// SeedDerived says no seed was given: Seed came from the history's and
	// the inventory's hashes (DeriveSeed), so the same history gives the
	// same proposal.
	SeedDerived bool    `json:"seedDerived,omitempty"`
	Replays     int     `json:"replays"`
	JitterS     float64 `json:"jitterSeconds"`
	// Source is where the workload was read from, in the terms needed to
	// read it again.
	Source Source `json:"source"`
	// Jobs and JobsHash are the replayed jobs (after Source's cut) and a
	// SHA-256 over them; Nodes and InventoryHash the same of the cluster.
	Jobs            int        `json:"jobs"`
	JobsHash        string     `json:"jobsHash"`
	Nodes           int        `json:"nodes"`
	InventoryHash   string     `json:"inventoryHash"`
	Objective       string     `json:"objective"`
	Guardrails      Guardrails `json:"guardrails"`
	HoldoutFraction float64    `json:"holdoutFraction"`
	Rounds          int        `json:"rounds"`
	MinGain         float64    `json:"minGain"`
	// Knobs are the parameters the search could move (none listed: every
	// one).
	Knobs []Knob `json:"knobs,omitempty"`
	// The replay settings that are not tuned (sim.Config's).
	Preemption               bool  `json:"preemption"`
	HighPriority             int32 `json:"highPriority"`
	PercentageOfNodesToScore int   `json:"percentageOfNodesToScore"`
	// StartLatencyS is sim.Config.StartLatency in seconds (StartLatency
	// estimates it from stored history; zero: none).
	StartLatencyS float64 `json:"startLatencySeconds,omitempty"`
	// StartLatencySpreadS is sim.Config.StartLatencySpread in seconds
	// (StartLatencies; empty: StartLatencyS for every job).
	StartLatencySpreadS []float64 `json:"startLatencySpreadSeconds,omitempty"`
	// Version is the program that computed the report (Version()).
	Version string `json:"version"`
}

// Source is where a tuning run's workload came from. Exactly one of the
// two forms is set: a stored history window (From, To, Namespace) or job
// and inventory files. Reading it is the caller's business.
type Source struct {
	// From and To bound the stored jobs replayed (created in [From, To));
	// To is also the end of the run time of jobs still running then.
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	// Namespace, when set, keeps only that namespace's jobs.
	Namespace string `json:"namespace,omitempty"`
	// Util is the GPU utilisation assumed for stored jobs.
	Util float64 `json:"util,omitempty"`
	// Levels are the topology label keys the stored nodes were read with.
	Levels []string `json:"levels,omitempty"`
	// JobsFile and NodesFile replace the stored jobs and nodes; Format and
	// Fanout are how they were read.
	JobsFile  string `json:"jobsFile,omitempty"`
	NodesFile string `json:"nodesFile,omitempty"`
	Format    string `json:"format,omitempty"`
	Fanout    []int  `json:"fanout,omitempty"`
	// MaxJobs cut the replay to the first jobs by arrival (0: all).
	MaxJobs int `json:"maxJobs,omitempty"`
	// KueueFairSharing replays Kueue's admission of stored history with
	// fair sharing on (KueueFrontFromHistory).
	KueueFairSharing bool `json:"kueueFairSharing,omitempty"`
}

// String describes s in one line.
func (s Source) String() string {
	var out string
	switch {
	case s.JobsFile != "":
		out = "jobs file " + s.JobsFile
	default:
		out = fmt.Sprintf("stored jobs created %s .. %s", s.From.UTC().Format(time.RFC3339), s.To.UTC().Format(time.RFC3339))
		if s.Namespace != "" {
			out += " in namespace " + s.Namespace
		}
	}
	if s.NodesFile != "" {
		out += ", nodes file " + s.NodesFile
	} else {
		out += ", stored nodes"
	}
	if s.MaxJobs > 0 {
		out += fmt.Sprintf(", first %d jobs", s.MaxJobs)
	}
	return out
}

// HashJobs is a SHA-256 over every replayed field of jobs, in order.
func HashJobs(jobs []sim.Job) string {
	h := sha256.New()
	for _, j := range jobs {
		hashJSON(h, j)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// HashCluster is a SHA-256 over the cluster's nodes (name, model,
// capacities, topology domains), in the cluster's order.
func HashCluster(c *sim.Cluster) string {
	h := sha256.New()
	fmt.Fprintf(h, "depth=%d\n", c.Depth)
	for _, n := range c.Nodes {
		hashJSON(h, struct {
			Name, Model         string
			GPUs                int
			CPUMilli, MemoryMiB int64
			Domains             []string
		}{n.Name, n.GPUModel, n.GPUCap(), n.CPUMilliCap, n.MemoryMiBCap, n.Domains})
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hashJSON(h hash.Hash, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Plain structs of numbers and strings always encode.
		panic(fmt.Sprintf("hash %T: %v", v, err))
	}
	h.Write(b)
	h.Write([]byte{'\n'})
}

// DeriveSeed is the seed of a run given none: the first 8 bytes of a
// SHA-256 over the jobs' and the inventory's hashes, never 0 (0 asks for a
// derived seed).
func DeriveSeed(jobsHash, inventoryHash string) uint64 {
	sum := sha256.Sum256([]byte(jobsHash + "/" + inventoryHash))
	return max(binary.BigEndian.Uint64(sum[:8]), 1)
}

// Version names the program computing a report: the module version, and the
// VCS revision it was built from when the build recorded one ("+dirty" when
// the tree had changes).
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		v += " " + rev[:min(12, len(rev))] + dirty
	}
	return v
}

// EvidenceAnnotationPrefix prefixes the annotations that name a published
// profile's evidence; a publisher replaces all of them together.
const EvidenceAnnotationPrefix = "evidence.schedloop.io/"

// Annotations names the report's inputs for the profile ConfigMap, so a
// kubectl user sees what the live profile was computed from and how to
// check it.
func (r Report) Annotations() map[string]string {
	x := r.Inputs
	g := x.Guardrails
	a := map[string]string{
		"seed":             fmt.Sprint(x.Seed),
		"replays":          fmt.Sprint(x.Replays),
		"jitter":           (time.Duration(x.JitterS * float64(time.Second))).String(),
		"history":          x.Source.String(),
		"history-jobs":     fmt.Sprint(x.Jobs),
		"history-sha256":   x.JobsHash,
		"inventory-nodes":  fmt.Sprint(x.Nodes),
		"inventory-sha256": x.InventoryHash,
		"objective":        x.Objective,
		"guardrails": fmt.Sprintf("margin=%g,headlineTolerance=%g,maxWeightDelta=%g,maxQueueChange=%g,rollbackThreshold=%g",
			g.Margin, g.HeadlineTolerance, g.Bounds.MaxWeightDelta, g.Bounds.MaxQueueChange, g.RollbackThreshold),
		"version": x.Version,
		"verify":  r.VerifyCommand(),
	}
	if !x.Source.From.IsZero() {
		a["history-from"] = x.Source.From.UTC().Format(time.RFC3339)
		a["history-to"] = x.Source.To.UTC().Format(time.RFC3339)
	}
	out := make(map[string]string, len(a))
	for k, v := range a {
		out[EvidenceAnnotationPrefix+k] = v
	}
	return out
}

// spread describes StartLatencySpreadS for the explanation ("" without).
func (x Inputs) spread() string {
	n := len(x.StartLatencySpreadS)
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (each job one of %d waits, %gs to %gs)", n, x.StartLatencySpreadS[0], x.StartLatencySpreadS[n-1])
}
