package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/schedloop/schedloop/internal/dbflags"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/tuner"
)

// DefaultTrace is the committed Philly slice (CC BY 4.0, see its
// ATTRIBUTION.md), relative to the repository root.
const DefaultTrace = "cmd/demo/testdata/philly/pollux_philly_window4000.csv"

// FullTrace is where the whole Philly job list lives next to a checkout that
// has the shared trace folder.
const FullTrace = "../shared/traces/philly/pollux_philly.csv"

// Values of -publish.
const (
	publishAlways  = "always"
	publishGuarded = "guarded"
)

// config is what the flags gather.
type config struct {
	short             bool
	speed             float64
	jobs, skip        int
	nodes, gpus       int
	fanout            string
	tracePath, format string
	maxGap, maxDur    time.Duration
	compress          float64
	knobs             []tuner.Knob
	highSeed          uint64
	db                *dbflags.Config
	listen            string
	keepRunning       bool
	scrapeEvery       time.Duration
	margin            float64
	replays, rounds   int
	phaseTimeout      time.Duration
	beforeProfile     string
	summaryOut        string
	publish           string
	verbose           bool
	surveyEvery       int
	pickEvery         int
	dra               bool
	gangAPI           podgroup.API
}

// preset is what -short changes: the size and pace of the replay.
type preset struct {
	speed             float64
	jobs, skip, nodes int
	compress          float64
}

// The presets put the trace's own jobs on a cluster smaller than the one
// they ran on, with arrivals 4x closer together, so jobs queue for GPUs
// for about half of their JCT as on a busy shared cluster. Sizes and
// compression were chosen in the simulator, under the stock profile with
// the seeded high-priority rule (seeds 1 and 2): 46% to 53% of JCT is
// queueing in both presets, most of it by jobs of 4 to 16 GPUs waiting for
// whole nodes. The short preset's window is the one -pick-every's rule
// chooses among the slice's 80-job windows starting every
// shortPickEvery jobs: the one queueing most under the stock profile in
// the simulator (53%, the last of them; TestShortPresetIsThePickedWindow
// holds the two together), so live scheduling latency cannot take it
// under the 40% a contended replay needs.
var (
	fullPreset  = preset{speed: 400, jobs: 150, nodes: 4, compress: 4}
	shortPreset = preset{speed: 360, jobs: 80, skip: 70, nodes: 3, compress: 4}
)

// shortPickEvery is the stride of the windows the short preset's was
// picked from.
const shortPickEvery = 5

// liveKnobs are the profile fields the shipped scheduler applies live and
// the tuner searches: every knob.
const liveKnobs = "weights,queues,order,starvationBound,reservation,preemption"

const usage = `demo runs schedloop's whole loop in one process and prints before/after figures.

It starts an in-process Kubernetes cluster (kube-apiserver on an embedded etcd)
with simulated GPU nodes and dcgm-exporters, the schedloop scheduler (the
shipped configuration with leader election off), the collector pipeline and
the dashboard, then:
  1. replays a slice of a public trace, arrivals compressed (-compress) so
     jobs queue for GPUs, under a stock-like profile (spread over the
     emptiest nodes, as kube-scheduler's LeastAllocated scoring does);
  2. runs the tuner, starting from that profile, on the history the collector
     stored, changing only what the scheduler applies live (-knobs), and
     publishes its proposal if the guardrails accept it (-publish);
  3. waits for the scheduler to reload that profile;
  4. replays the same slice again under it;
  5. prints GPU idle share, mean JCT, mean queueing and high-priority p95 wait
     of both replays, read from Postgres, beside the tuner's prediction.
Ctrl-C stops everything.

Usage: demo [flags]

Flags:
`

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	c := config{}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.db = dbflags.Register(fs, getenv)
	c.db.RegisterAutoMigrate(fs)
	g := tuner.DefaultGuardrails()
	fs.BoolVar(&c.short, "short", false, fmt.Sprintf("short mode: %d jobs (after %d) on %d nodes at %gx (a few minutes) instead of %d jobs on %d nodes at %gx",
		shortPreset.jobs, shortPreset.skip, shortPreset.nodes, shortPreset.speed, fullPreset.jobs, fullPreset.nodes, fullPreset.speed))
	fs.Float64Var(&c.compress, "compress", 0, "divide the time between arrivals by this (after -max-gap), so the slice contends for GPUs as a busy cluster does (0: the mode's default, 1: the trace's own pace)")
	knobs := fs.String("knobs", liveKnobs, "profile fields the tuner may change, comma-separated ("+tuner.KnobList(tuner.Knobs)+"; empty: every one); the default is what the scheduler applies live")
	fs.Float64Var(&c.speed, "speed", 0, "trace seconds per wall second (0: the mode's default)")
	fs.IntVar(&c.jobs, "jobs", 0, "jobs replayed in each phase, taken in arrival order after -skip (0: the mode's default)")
	fs.IntVar(&c.skip, "skip", -1, "jobs at the start of the trace (by arrival) to leave out (-1: the mode's default)")
	fs.IntVar(&c.nodes, "nodes", 0, "simulated GPU nodes (0: the mode's default)")
	fs.IntVar(&c.gpus, "gpus-per-node", 8, "GPUs per simulated node")
	fs.StringVar(&c.fanout, "fanout", "1,2,2", "units per topology level above the host (spine,rack,nvlink-domain)")
	fs.StringVar(&c.tracePath, "trace", DefaultTrace, "job trace to replay (Philly CSV, openb pod CSV, job CSV/YAML); the full Philly list is "+FullTrace+" where ../shared exists")
	fs.StringVar(&c.format, "trace-format", "", "format of -trace: philly, openb, csv or yaml (empty: detect)")
	fs.DurationVar(&c.maxGap, "max-gap", 10*time.Minute, "trace time between consecutive arrivals longer than this is shortened to it (quiet days are skipped)")
	fs.DurationVar(&c.maxDur, "max-duration", 2*time.Hour, "trace run times are capped at this, so a phase ends in bounded time")
	fs.Uint64Var(&c.highSeed, "high-priority-seed", 1, "seed of the high-priority rule: a job runs at priority 1 and counts as high priority when the FNV-1a hash of \"seed/name\" is 0 modulo 10 (about one job in ten, as make eval's hp row); the trace records no priorities")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "address of the dashboard, the JSON API and /metrics")
	fs.BoolVar(&c.keepRunning, "keep-running", false, "after the summary, keep the cluster, collector and dashboard up until interrupted")
	fs.DurationVar(&c.scrapeEvery, "scrape-interval", 2*time.Second, "how often the simulated dcgm-exporters are scraped")
	fs.Float64Var(&c.margin, "margin", g.Margin, "relative held-out gain the tuner's proposal needs before it is published")
	fs.IntVar(&c.replays, "replays", 3, "tuner replays per evaluation")
	fs.IntVar(&c.rounds, "rounds", 1, "tuner coordinate-descent rounds")
	fs.DurationVar(&c.phaseTimeout, "phase-timeout", 15*time.Minute, "give up when one replay takes longer than this")
	fs.StringVar(&c.beforeProfile, "before-profile", "", "profile document the first replay runs under and the tuner starts from (empty: the built-in stock-leastallocated, what an untuned kube-scheduler's LeastAllocated scoring does)")
	fs.StringVar(&c.publish, "publish", publishGuarded, "when the tuner's proposal reaches the scheduler: \""+publishGuarded+"\" only if the guardrails (-margin, 95% lower bound, no headline number worse past its tolerance) accept it, as `tuner run` does; \""+publishAlways+"\" even when they do not, so the reload is always shown (the stored profile says so)")
	fs.StringVar(&c.summaryOut, "summary-out", "", "also write the summary as JSON to this file")
	fs.IntVar(&c.surveyEvery, "survey-every", 0, "instead of running the loop, replay in the simulator (no cluster, no database) every window of -jobs jobs that starts at every this many jobs of -trace, cut as the loop cuts its slice, under -before-profile and under it ordered by shortest service (run times predicted from a table fitted on the window, and exact), and print how much the order moves each window's mean JCT, then what the tuner proposes from each window as the loop's tuning step would (-knobs, -replays, -rounds, -margin), how that proposal moves the window's mean JCT and whether the guardrails publish it (0: run the loop)")
	fs.IntVar(&c.pickEvery, "pick-every", 0, "choose -skip: of the windows of -jobs jobs starting every this many jobs of -trace, replay the one whose jobs queue for the largest share of their JCT under -before-profile in the simulator (the earliest on a tie; the rule looks at the stock replay only, never at what tuning gains); 0: -skip as given")
	fs.BoolVar(&c.dra, "dra", false, "hand GPUs out through Dynamic Resource Allocation: the simulated nodes publish their GPUs in ResourceSlices as NVIDIA's DRA driver does, and each job's members ask for whole GPUs through ResourceClaimTemplates (GPU shares in the trace are still asked as schedloop.io/gpu-milli, which DRA nodes do not offer: use a trace of whole GPUs, as the default is)")
	gangAPI := fs.String("gang-api", string(podgroup.APIWorkload), "how replayed jobs of more than one pod are declared as gangs: workload (Kubernetes Workload API, scheduling.k8s.io/v1beta1: a Workload, its PodGroup, pods' spec.schedulingGroup; the apiserver and scheduler run with feature GenericWorkload) or podgroup (scheduler-plugins PodGroup CRD and pod label); under either, a job of one pod is a plain pod, as the simulator replays it")
	fs.BoolVar(&c.verbose, "v", false, "log apiserver, etcd, scheduler and collector output to stderr")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	p := fullPreset
	if c.short {
		p = shortPreset
	}
	if c.speed == 0 {
		c.speed = p.speed
	}
	if c.jobs == 0 {
		c.jobs = p.jobs
	}
	if c.skip == -1 {
		c.skip = p.skip
	}
	if c.nodes == 0 {
		c.nodes = p.nodes
	}
	if c.compress == 0 {
		c.compress = p.compress
	}
	var err error
	if c.knobs, err = tuner.ParseKnobs(*knobs); err != nil {
		return c, fmt.Errorf("flag -knobs: %w", err)
	}
	if c.gangAPI, err = podgroup.ParseAPI(*gangAPI); err != nil {
		return c, fmt.Errorf("flag -gang-api: %w", err)
	}
	return c, c.validate()
}

func (c config) validate() error {
	switch {
	case !(c.speed > 0):
		return fmt.Errorf("flag -speed: %v must be positive", c.speed)
	case c.jobs < 10:
		return fmt.Errorf("flag -jobs: %d is below 10, too few for the tuner to learn from", c.jobs)
	case c.skip < 0:
		return fmt.Errorf("flag -skip: %d is negative", c.skip)
	case c.nodes < 1:
		return fmt.Errorf("flag -nodes: %d is below 1", c.nodes)
	case c.gpus < 1:
		return fmt.Errorf("flag -gpus-per-node: %d is below 1", c.gpus)
	case c.maxGap <= 0:
		return fmt.Errorf("flag -max-gap: %v must be positive", c.maxGap)
	case !(c.compress >= 1) || math.IsInf(c.compress, 0):
		return fmt.Errorf("flag -compress: %v must be 1 or more", c.compress)
	case c.maxDur <= 0:
		return fmt.Errorf("flag -max-duration: %v must be positive", c.maxDur)
	case c.scrapeEvery <= 0:
		return fmt.Errorf("flag -scrape-interval: %v must be positive", c.scrapeEvery)
	case !(c.margin >= 0 && c.margin < 1):
		return fmt.Errorf("flag -margin: %v is outside [0, 1)", c.margin)
	case c.replays < 1:
		return fmt.Errorf("flag -replays: %d is below 1", c.replays)
	case c.rounds < 1:
		return fmt.Errorf("flag -rounds: %d is below 1", c.rounds)
	case c.publish != publishAlways && c.publish != publishGuarded:
		return fmt.Errorf("flag -publish: %q is neither %q nor %q", c.publish, publishAlways, publishGuarded)
	case c.surveyEvery < 0:
		return fmt.Errorf("flag -survey-every: %d is negative", c.surveyEvery)
	case c.pickEvery < 0:
		return fmt.Errorf("flag -pick-every: %d is negative", c.pickEvery)
	case c.phaseTimeout <= 0:
		return fmt.Errorf("flag -phase-timeout: %v must be positive", c.phaseTimeout)
	}
	return nil
}

var errHelp = flag.ErrHelp

func isHelp(err error) bool { return errors.Is(err, errHelp) }
