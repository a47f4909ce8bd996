package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/dbflags"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/trace"
	"github.com/schedloop/schedloop/internal/tuner"
	"github.com/schedloop/schedloop/internal/tuner/lifecycle"
	"github.com/schedloop/schedloop/internal/tuner/publish"
	"github.com/schedloop/schedloop/internal/why"
)

// tuneFlags are the flags `tuner run` and `tuner loop` share.
type tuneFlags struct {
	db                               *dbflags.Config
	jobs, nodes, format, fanout      string
	since                            time.Duration
	maxJobs                          int
	levels                           string
	util                             float64
	current, name, objective         string
	margin, holdout, minGain         float64
	replays, rounds                  int
	seed                             uint64
	jitter                           time.Duration
	maxWeightDelta, maxQueueChange   float64
	rollbackThreshold                float64
	headlineTolerance                float64
	preemption, kueueFairSharing     bool
	highPriority                     int
	percentageOfNodesToScore         int
	record, dryRun, quiet            bool
	kubeconfig, namespace, configMap string
	schedConfigOut, schedulerName    string
	reportOut                        string
}

func registerTuneFlags(fs *flag.FlagSet, getenv func(string) string) *tuneFlags {
	f := &tuneFlags{db: dbflags.Register(fs, getenv)}
	g := tuner.DefaultGuardrails()
	fs.StringVar(&f.jobs, "jobs", "", "replay this job file (openb, Philly, job CSV/YAML) instead of the stored history")
	fs.StringVar(&f.nodes, "nodes", "", "inventory for -jobs (openb node list, Philly machine list, inventory YAML); without it the stored nodes")
	fs.StringVar(&f.format, "format", "", "format of -jobs and -nodes: openb, philly, csv, yaml; empty detects it")
	fs.StringVar(&f.fanout, "fanout", "1,4,8", "topology fanout for CSV node lists (children per level above the host)")
	fs.DurationVar(&f.since, "since", 30*24*time.Hour, "stored history to replay: jobs created this long before now")
	fs.IntVar(&f.maxJobs, "max-jobs", 0, "replay at most the first N jobs by arrival (0: all)")
	fs.StringVar(&f.levels, "topology-levels", strings.Join(trace.DefaultLevels, ","), "node-label keys of the topology levels, outermost first")
	fs.Float64Var(&f.util, "util", trace.DefaultUtil, "GPU utilisation assumed for stored jobs while they run (0..1)")
	fs.BoolVar(&f.kueueFairSharing, "kueue-fair-sharing", false, "replay Kueue's admission of the stored history with fair sharing on, as Kueue's Configuration sets it (stored ClusterQueues put Kueue in front of the replays)")
	fs.StringVar(&f.current, "current", "", "current profile: a profile YAML file, \"default\" for the built-in default, or empty for the profile applied in the database (the default when none is)")
	fs.StringVar(&f.name, "name", "", "name of the proposed profile (default tuned-<UTC time>)")
	fs.StringVar(&f.objective, "objective", tuner.DefaultObjective().String(), "objective weights, metric=weight,... (all lower-is-better)")
	fs.Float64Var(&f.margin, "margin", g.Margin, "relative held-out gain a proposal needs before it is published")
	fs.Float64Var(&f.holdout, "holdout", 0.3, "later share of the history held out of the search to judge the proposal (replayed after the earlier jobs, which load the cluster but are not measured)")
	fs.Float64Var(&f.minGain, "min-gain", 0.002, "relative training gain a search move needs to be kept")
	fs.IntVar(&f.replays, "replays", 5, "replays per evaluation (the first as recorded, the rest with arrival jitter)")
	fs.IntVar(&f.rounds, "rounds", 2, "coordinate-descent rounds")
	fs.DurationVar(&f.jitter, "jitter", 10*time.Minute, "largest arrival shift in the jittered replays")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of every random draw in the replays and the search (recorded in the report; the same inputs and seed give the same report); 0 derives it from the hashes of the history and inventory, so the same history gives the same proposal")
	fs.Float64Var(&f.maxWeightDelta, "max-weight-delta", g.Bounds.MaxWeightDelta, "largest change of one term weight per tuning step")
	fs.Float64Var(&f.maxQueueChange, "max-queue-change", g.Bounds.MaxQueueChange, "largest relative change of a queue's GPU limit per step")
	fs.Float64Var(&f.headlineTolerance, "headline-tolerance", g.HeadlineTolerance, "relative worsening of any headline number (GPU idle share, mean JCT, p95 JCT, high-priority p95 wait) on the held-out replays that stops a proposal, whatever the objective gains")
	fs.Float64Var(&f.rollbackThreshold, "rollback-threshold", g.RollbackThreshold, "measured relative regression that rolls an applied profile back")
	fs.BoolVar(&f.preemption, "preemption", true, "replay with priority preemption, as the scheduler's SchedloopPreemption does (whole jobs, fewest GPU-hours lost)")
	fs.IntVar(&f.highPriority, "high-priority", 1, "jobs at or above this priority count as critical for the high-priority wait")
	fs.IntVar(&f.percentageOfNodesToScore, "percentage-of-nodes-to-score", 0, "the scheduler profile's percentageOfNodesToScore, so replays score lone pods on the sample the scheduler scores (0: kube-scheduler's adaptive default, as deploy/scheduler-config.yaml ships; 100: every node)")
	fs.BoolVar(&f.record, "record", true, "store the proposal and its evidence in the database")
	fs.BoolVar(&f.dryRun, "dry-run", false, "decide but publish nothing (no ConfigMap, no applied profile)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar")
	fs.StringVar(&f.kubeconfig, "kubeconfig", getenv("KUBECONFIG"), "kubeconfig of the cluster whose scheduler reads the profile ConfigMap (env KUBECONFIG); empty publishes no ConfigMap")
	fs.StringVar(&f.namespace, "namespace", "kube-system", "namespace of the profile ConfigMap")
	fs.StringVar(&f.configMap, "configmap", profile.DefaultConfigMapName, "name of the profile ConfigMap")
	fs.StringVar(&f.schedConfigOut, "scheduler-config-out", "", "also write a KubeSchedulerConfiguration for the stock scheduler to this file")
	fs.StringVar(&f.schedulerName, "scheduler-name", "default-scheduler", "schedulerName in the -scheduler-config-out file")
	fs.StringVar(&f.reportOut, "report-out", "", "also write the evidence report as JSON to this file")
	return f
}

func (f *tuneFlags) validate() (tuner.Objective, tuner.Guardrails, error) {
	o, err := tuner.ParseObjective(f.objective)
	if err != nil {
		return nil, tuner.Guardrails{}, fmt.Errorf("flag -objective: %w", err)
	}
	g := tuner.Guardrails{Margin: f.margin, RollbackThreshold: f.rollbackThreshold, HeadlineTolerance: f.headlineTolerance, Bounds: tuner.Bounds{
		MaxWeightDelta: f.maxWeightDelta, MaxQueueChange: f.maxQueueChange}}
	switch {
	case f.percentageOfNodesToScore < 0 || f.percentageOfNodesToScore > 100:
		return nil, g, fmt.Errorf("flag -percentage-of-nodes-to-score: %d is outside 0..100", f.percentageOfNodesToScore)
	case f.replays < 1:
		return nil, g, fmt.Errorf("flag -replays: %d must be at least 1", f.replays)
	case f.rounds < 1:
		return nil, g, fmt.Errorf("flag -rounds: %d must be at least 1", f.rounds)
	case !(f.holdout > 0 && f.holdout < 1):
		return nil, g, fmt.Errorf("flag -holdout: %v is outside (0, 1)", f.holdout)
	case !(f.util >= 0 && f.util <= 1):
		return nil, g, fmt.Errorf("flag -util: %v is outside 0..1", f.util)
	case f.jitter < 0:
		return nil, g, fmt.Errorf("flag -jitter: %v is negative", f.jitter)
	case f.maxJobs < 0:
		return nil, g, fmt.Errorf("flag -max-jobs: %d is negative", f.maxJobs)
	case f.since <= 0:
		return nil, g, fmt.Errorf("flag -since: %v must be positive", f.since)
	case !(f.minGain >= 0):
		return nil, g, fmt.Errorf("flag -min-gain: %v is negative", f.minGain)
	}
	if err := g.Validate(); err != nil {
		return nil, g, fmt.Errorf("flags -margin/-max-*/-rollback-threshold: %w", err)
	}
	return o, g, nil
}

// needsDB reports whether this invocation reads or writes the database.
func (f *tuneFlags) needsDB() bool {
	return f.record || f.jobs == "" || f.nodes == "" || f.current == ""
}

// source names what to replay as of now: job and node files, or the
// stored history of the last -since.
func (f *tuneFlags) source(now time.Time) (tuner.Source, error) {
	fan, err := parseInts(f.fanout)
	if err != nil {
		return tuner.Source{}, fmt.Errorf("flag -fanout: %w", err)
	}
	src := tuner.Source{JobsFile: f.jobs, NodesFile: f.nodes, Format: f.format, MaxJobs: f.maxJobs}
	if f.nodes != "" {
		src.Fanout = fan
	} else {
		src.Levels = strings.Split(f.levels, ",")
	}
	if f.jobs == "" {
		src.From, src.To, src.Util, src.KueueFairSharing = now.Add(-f.since), now, f.util, f.kueueFairSharing
	}
	return src, nil
}

// currentProfile is the profile the proposal must beat, and its stored ID.
func (f *tuneFlags) currentProfile(ctx context.Context, s *store.Store) (profile.Document, int64, error) {
	if f.current == builtinProfile {
		return profile.Default(), 0, nil
	}
	if f.current != "" {
		data, err := os.ReadFile(f.current)
		if err != nil {
			return profile.Document{}, 0, fmt.Errorf("flag -current: %w", err)
		}
		d, err := profile.Parse(data)
		if err != nil {
			return d, 0, fmt.Errorf("flag -current: %s: %w", f.current, err)
		}
		return d, 0, nil
	}
	if s != nil {
		p, err := s.AppliedProfile(ctx)
		if err == nil {
			return profile.FromDomain(p), p.ID, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return profile.Document{}, 0, err
		}
	}
	return profile.Default(), 0, nil
}

func (f *tuneFlags) kubeClient() (kubernetes.Interface, error) {
	if f.kubeconfig == "" {
		return nil, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("flag -kubeconfig: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

func runRun(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tuner run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := registerTuneFlags(fs, getenv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o, g, err := f.validate()
	if err != nil {
		return err
	}
	var s *store.Store
	if f.needsDB() {
		if s, err = f.db.Open(ctx, stderr); err != nil {
			return err
		}
		defer s.Close()
	}
	kube, err := f.kubeClient()
	if err != nil {
		return err
	}
	_, err = tuneOnce(ctx, f, o, g, s, kube, time.Now(), stdout, stderr)
	return err
}

// tuneOnce runs one tuning pass and publishes what the guardrails allow.
func tuneOnce(ctx context.Context, f *tuneFlags, o tuner.Objective, g tuner.Guardrails, s *store.Store,
	kube kubernetes.Interface, now time.Time, stdout, stderr io.Writer) (tuner.Report, error) {
	src, err := f.source(now)
	if err != nil {
		return tuner.Report{}, err
	}
	if s == nil && (src.JobsFile == "" || src.NodesFile == "") {
		return tuner.Report{}, errors.New("flag -nodes: needed when the database is not used")
	}
	w, err := lifecycle.Load(ctx, s, src)
	if err != nil {
		return tuner.Report{}, err
	}
	cur, curID, err := f.currentProfile(ctx, s)
	if err != nil {
		return tuner.Report{}, err
	}
	name := f.name
	if name == "" {
		name = "tuned-" + now.UTC().Format("20060102-150405")
	}
	var bar *progressBar
	if !f.quiet {
		bar = newProgress(stderr, "search", time.Now)
	}
	base := sim.Config{Preemption: f.preemption, HighPriority: int32(f.highPriority), PercentageOfNodesToScore: f.percentageOfNodesToScore}
	// The replays start each job as late as the control plane started the
	// stored jobs that had room, as the demo's do: what they predict is
	// what this cluster will measure.
	if base, err = lifecycle.WithStartLatency(ctx, s, src, w, base, cur.Params()); err != nil {
		return tuner.Report{}, err
	}
	rep, err := tuner.Tune(ctx, tuner.Input{Workload: w, Current: cur, Name: name, Objective: o, Guard: g, Source: src,
		Replays:         tuner.Replays{Count: f.replays, Jitter: f.jitter, Seed: f.seed},
		HoldoutFraction: f.holdout, Rounds: f.rounds, MinGain: f.minGain,
		Base: base,
		Progress: func(done, total int, best float64) {
			bar.update(done, total, fmt.Sprintf("candidates, last gain %+.2f%%", 100*best))
		},
	})
	if err != nil {
		return rep, err
	}
	if err := rep.Explain(stdout); err != nil {
		return rep, err
	}
	if w.Kueue != nil {
		// Kueue's quota is the operator's: the proposal is printed and
		// stored for the dashboard, never applied.
		cfg := base
		cfg.Params = cur.Params()
		qr, err := tuner.RecommendKueueQuota(ctx, w, cfg, now)
		if err != nil {
			return rep, err
		}
		explainKueueQuota(stdout, qr)
		if s != nil && f.record && !f.dryRun {
			if _, err := s.InsertKueueQuotaRecommendation(ctx, qr); err != nil {
				return rep, err
			}
		}
	}
	if f.reportOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return rep, err
		}
		if err := os.WriteFile(f.reportOut, b, 0o644); err != nil {
			return rep, fmt.Errorf("flag -report-out: %w", err)
		}
	}
	if f.schedConfigOut != "" {
		b, err := tuner.SchedulerConfig(rep.Proposed, f.schedulerName)
		if err != nil {
			return rep, err
		}
		if err := os.WriteFile(f.schedConfigOut, b, 0o644); err != nil {
			return rep, fmt.Errorf("flag -scheduler-config-out: %w", err)
		}
		fmt.Fprintf(stdout, "wrote KubeSchedulerConfiguration for the stock scheduler to %s\n", f.schedConfigOut)
	}
	publishIt := rep.Decision.Publish && !f.dryRun
	l := f.lifecycle(s, kube, stdout)
	if !f.record || s == nil {
		if publishIt && l.Publisher != nil {
			// Nothing stored: the ConfigMap's annotations are the only
			// record of what the profile was computed from.
			note, err := l.Publisher.Publish(ctx, rep.Proposed, rep.Predictor, rep.Annotations())
			if note != "" {
				fmt.Fprintln(stdout, note)
			}
			return rep, err
		}
		return rep, nil
	}
	p, err := l.Record(ctx, rep, curID, "")
	if err != nil {
		return rep, err
	}
	if publishIt {
		return rep, l.Publish(ctx, p, now)
	}
	return rep, nil
}

// lifecycle records in s and publishes to the -configmap of kube (nil: no
// cluster, the database is the only record).
func (f *tuneFlags) lifecycle(s *store.Store, kube kubernetes.Interface, out io.Writer) *lifecycle.Lifecycle {
	l := &lifecycle.Lifecycle{Store: s, Out: out}
	if kube != nil {
		l.Publisher = publish.ConfigMapPublisher{Client: kube, Namespace: f.namespace, Name: f.configMap}
	}
	return l
}

// builtinProfile is the -current value that names profile.Default.
const builtinProfile = "default"

// explainKueueQuota prints a ClusterQueue quota proposal with its replayed
// evidence and the patch that applies it.
func explainKueueQuota(w io.Writer, r schedloop.KueueQuotaRecommendation) {
	if len(r.Changes) == 0 {
		fmt.Fprintf(w, "Kueue quota: no nominal quota move shortens the %d jobs' replayed wait for quota (%.0fs)\n", r.Jobs, r.QuotaWaitBeforeS)
		return
	}
	fmt.Fprintf(w, "Kueue quota proposal (apply it yourself; schedloop does not), replayed over %d jobs behind Kueue:\n", r.Jobs)
	for _, c := range r.Changes {
		fmt.Fprintf(w, "  ClusterQueue %s %s on %s: nominal %s -> %s\n", c.ClusterQueue, c.Resource, c.Flavor, why.Quantity(c.From), why.Quantity(c.To))
	}
	fmt.Fprintf(w, "  time waiting for quota %.0fs -> %.0fs; mean wait to start %.0fs -> %.0fs\n%s",
		r.QuotaWaitBeforeS, r.QuotaWaitAfterS, r.MeanWaitBeforeS, r.MeanWaitAfterS, r.Patch)
}
