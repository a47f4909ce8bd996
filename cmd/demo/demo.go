package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/schedloop/schedloop/deploy"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/player"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/schedplugins"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/trace"
	"github.com/schedloop/schedloop/internal/tuner/publish"
)

const (
	// SchedulerName is the profile of the shipped configuration.
	SchedulerName = "schedloop"
	// profileNamespace holds the profile ConfigMap the shipped
	// configuration names.
	profileNamespace = "kube-system"
	// Each replay runs in a namespace of its own, named with the run's
	// start time so runs sharing a database never mix.
	nsBefore = "demo-before-"
	nsAfter  = "demo-after-"
)

// schedulerConfig is the shipped KubeSchedulerConfiguration with leader
// election off, the in-process cluster's kubeconfig, and kube-scheduler's
// retry backoff at its floor. The backoff is wall time: its defaults (1 s
// doubling to 10 s, times the square root of a gang's size) stand for
// speed times as much trace time, up to hours at the demo's pace, so a job
// would wait for the scheduler's timer rather than for GPUs, by an amount
// that depends on how many attempts the machine's timing happened to make.
// The tuner's replays have no such timer; at one second, the floor, it is
// minutes of trace time, mostly hidden by kube-scheduler trying a
// backing-off pod at once when nothing else waits.
func schedulerConfig(kubeconfig string) string {
	return deploy.SchedulerConfig + fmt.Sprintf(`leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: %s
  qps: 500
  burst: 1000
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 1
`, kubeconfig)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	if c.surveyEvery > 0 {
		return survey(ctx, c, stdout)
	}
	if c.pickEvery > 0 {
		if c.skip, err = pickWindow(c, stdout); err != nil {
			return err
		}
	}
	_, err = demo(ctx, c, stdout, stderr)
	if err != nil && ctx.Err() != nil {
		fmt.Fprintln(stdout, "interrupted; everything stopped")
		return nil
	}
	return err
}

// demo runs the loop once and returns the summary it printed.
func demo(ctx context.Context, c config, stdout, stderr io.Writer) (Summary, error) {
	began := time.Now()
	say := func(format string, a ...any) {
		fmt.Fprintf(stdout, "[%5.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, a...))
	}
	jobs, err := loadWorkload(c)
	if err != nil {
		return Summary{}, err
	}
	inv, err := inventory(c)
	if err != nil {
		return Summary{}, err
	}
	start, err := beforeProfile(c)
	if err != nil {
		return Summary{}, err
	}
	total := 0
	for _, j := range jobs {
		total += j.TotalGPUs()
	}
	say("workload: %d jobs (%d GPUs asked in all) from %s, arrivals %gx closer than the trace's, replayed at %gx on %d nodes x %d GPUs",
		len(jobs), total, c.tracePath, c.compress, c.speed, c.nodes, c.gpus)

	s, err := c.db.Open(ctx, io.Discard)
	if err != nil {
		return Summary{}, err
	}
	defer s.Close()
	say("postgres: %s (schema current)", store.Redact(c.db.URL))

	logOut := io.Discard
	if c.verbose {
		logOut = stderr
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cluster, err := harness.Start(ctx, harness.Options{Log: nilIfDiscard(logOut), WorkloadAPI: c.gangAPI == podgroup.APIWorkload})
	if err != nil {
		return Summary{}, err
	}
	defer cluster.Stop()
	say("kube-apiserver + etcd up in %v; kubeconfig %s", cluster.StartupTime.Round(time.Millisecond), cluster.Kubeconfig)
	runID := began.UTC().Format("20060102-150405")
	before, after := nsBefore+runID, nsAfter+runID
	for _, ns := range []string{profileNamespace, before, after} {
		_, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return Summary{}, fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	clock, err := harness.NewClock(c.speed)
	if err != nil {
		return Summary{}, fmt.Errorf("flag -speed: %w", err)
	}
	nodes, err := cluster.AddNodes(ctx, inv.Nodes, harness.NodeOptions{Clock: clock, Heartbeat: 30 * time.Second, DRA: c.dra})
	if err != nil {
		return Summary{}, err
	}
	var exporters []string
	for _, n := range nodes.Names() {
		exporters = append(exporters, nodes.ExporterURL(n))
	}
	say("%d simulated GPU nodes registered, each with a dcgm-exporter (%s, ...)", len(exporters), exporters[0])

	plugins := schedplugins.NewSet()
	if _, err := cluster.StartScheduler(ctx, harness.SchedulerOptions{Config: schedulerConfig(cluster.Kubeconfig), Plugins: plugins.Options()}); err != nil {
		return Summary{}, err
	}
	say("scheduler %q running the shipped configuration; active profile %q", SchedulerName, plugins.Profile.Load().Doc.Name)
	reloaded := func(want string) error {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return plugins.Profile.Load().Doc.Name == want, nil
		})
		if err != nil {
			return fmt.Errorf("scheduler did not reload profile %s from ConfigMap %s/%s: %w", want, profileNamespace, profile.DefaultConfigMapName, err)
		}
		a := plugins.Profile.Load()
		say("scheduler reloaded profile %q from ConfigMap %s/%s (generation %d, weights %v)",
			a.Doc.Name, profileNamespace, profile.DefaultConfigMapName, a.Generation, a.Doc.Weights)
		return nil
	}
	// The first replay runs under the stock-like profile, published the way
	// the tuner publishes, so the scheduler reaches it by the same reload.
	if _, err := publish.ConfigMap(ctx, cluster.Client, profileNamespace, profile.DefaultConfigMapName, start, nil, nil); err != nil {
		return Summary{}, err
	}
	if err := reloaded(start.Name); err != nil {
		return Summary{}, err
	}

	col, err := startCollection(ctx, s, cluster.Client, cluster.Dynamic, exporters, c.scrapeEvery, log)
	if err != nil {
		return Summary{}, err
	}
	defer func() {
		if err := col.close(); err != nil {
			fmt.Fprintf(stderr, "collector stopped with errors: %v\n", err)
		}
	}()
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return Summary{}, fmt.Errorf("listen on %s (flag -listen): %w", c.listen, err)
	}
	srvCtx, stopSrv := context.WithCancel(ctx)
	waitSrv := serveDashboard(srvCtx, ln, s, col.reg)
	defer func() {
		stopSrv()
		if err := waitSrv(); err != nil {
			fmt.Fprintln(stderr, err)
		}
	}()
	dashboard := "http://" + ln.Addr().String() + "/"
	say("collector running (watcher, scraper every %v, ingest, rollups); dashboard %s", c.scrapeEvery, dashboard)

	sum := Summary{Trace: c.tracePath, Speed: c.speed, Compress: c.compress, Dashboard: dashboard}
	d := &demoRun{c: c, s: s, cluster: cluster, col: col, say: say}

	sum.Before = PhaseSummary{Phase: "before", Namespace: before, Profile: plugins.Profile.Load().Doc.Name}
	if err := d.replay(ctx, &sum.Before, jobs); err != nil {
		return sum, err
	}
	tuned, err := tuneOnce(ctx, c, s, cluster.Client, before, sum.Before.Began, start, say)
	if err != nil {
		return sum, err
	}
	sum.Published, sum.Accepted, sum.Reason = tuned.published, tuned.report.Decision.Publish, tuned.report.Decision.Reason
	sum.StartLatencySeconds = tuned.report.Inputs.StartLatencyS
	if tuned.published {
		if err := reloaded(tuned.report.Proposed.Name); err != nil {
			return sum, err
		}
		// The prediction beside the measurement is the one stored with
		// the profile, as `tuner explain` shows it.
		stored, err := s.GetProfile(ctx, tuned.profileID)
		if err != nil {
			return sum, err
		}
		sum.Predicted = stored.Predicted
	}
	// Phase 2 starts after phase 1's last job ended, so no GPU sample
	// belongs to both.
	if err := d.finishWindow(ctx, &sum.Before); err != nil {
		return sum, err
	}
	sum.After = PhaseSummary{Phase: "after", Namespace: after, Profile: plugins.Profile.Load().Doc.Name}
	if err := d.replay(ctx, &sum.After, jobs); err != nil {
		return sum, err
	}
	if err := d.finishWindow(ctx, &sum.After); err != nil {
		return sum, err
	}
	for _, p := range []*PhaseSummary{&sum.Before, &sum.After} {
		p.RoundSeconds = c.scrapeEvery.Seconds()
		if err := readPhase(ctx, s, p, store.DefaultIdleThreshold); err != nil {
			return sum, err
		}
	}
	sum.print(stdout)
	if c.summaryOut != "" {
		if err := sum.writeJSON(c.summaryOut); err != nil {
			return sum, err
		}
	}
	say("loop complete")
	if c.keepRunning {
		say("still serving %s; Ctrl-C stops", dashboard)
		<-ctx.Done()
	}
	return sum, nil
}

func nilIfDiscard(w io.Writer) io.Writer {
	if w == io.Discard {
		return nil
	}
	return w
}

// demoRun is what the phases share.
type demoRun struct {
	c       config
	s       *store.Store
	cluster *harness.Cluster
	col     *collection
	say     func(string, ...any)
}

// replay plays jobs into the phase's namespace and waits until the
// collector has stored every one of them as finished.
func (d *demoRun) replay(ctx context.Context, p *PhaseSummary, jobs []trace.Job) error {
	clock, err := harness.NewClock(d.c.speed)
	if err != nil {
		return err
	}
	pl, err := player.New(d.cluster.Client, d.cluster.Dynamic, jobs, player.Options{Clock: clock, Namespace: p.Namespace, SchedulerName: SchedulerName, GPUClaims: d.c.dra, GangAPI: d.c.gangAPI})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d.c.phaseTimeout)
	defer cancel()
	p.Began = time.Now().Add(-time.Second)
	d.say("replay %q: %d jobs into namespace %s under profile %q", p.Phase, len(jobs), p.Namespace, p.Profile)
	done := make(chan error, 1)
	go func() {
		_, err := pl.Run(ctx)
		done <- err
	}()
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("replay %s: %w", p.Phase, err)
			}
			running = false
		case <-tick.C:
			d.progress(p.Phase, pl.Report())
		}
	}
	d.progress(p.Phase, pl.Report())
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		span, err := d.s.NamespaceJobSpan(ctx, p.Namespace, p.Began)
		return err == nil && span.Jobs == len(jobs) && span.Finished == span.Jobs, err
	})
	if err != nil {
		return fmt.Errorf("replay %s: wait for the collector to store %d finished jobs: %w", p.Phase, len(jobs), err)
	}
	d.say("replay %q: collector stored all %d jobs as finished", p.Phase, len(jobs))
	return nil
}

func (d *demoRun) progress(phase string, r player.Report) {
	var submitted, running, finished int
	for _, j := range r.Jobs {
		switch {
		case j.Done():
			finished++
		case !j.FirstStart.IsZero():
			running++
		}
		if !j.Submitted.IsZero() {
			submitted++
		}
	}
	d.say("replay %q: %d submitted, %d running, %d finished of %d", phase, submitted, running, finished, len(r.Jobs))
}

// finishWindow waits until the collector has stored GPU samples from after
// the phase's last job ended, so the summary counts every sample of it, and
// brings the rollups the dashboard reads up to date.
func (d *demoRun) finishWindow(ctx context.Context, p *PhaseSummary) error {
	span, err := d.s.NamespaceJobSpan(ctx, p.Namespace, p.Began)
	if err != nil {
		return err
	}
	from, to := span.From, span.To
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := d.s.CountGPUSamples(ctx, to.Add(time.Second), to.Add(time.Hour))
		return n > 0, err
	})
	if err != nil {
		return fmt.Errorf("wait for GPU samples after %s: %w", to.Format(time.TimeOnly), err)
	}
	d.col.pipe.Roller.Written(from, to)
	if err := d.col.rollup(ctx); err != nil {
		return err
	}
	d.say("replay %q: GPU samples %s..%s stored", p.Phase, from.Local().Format(time.TimeOnly), to.Local().Format(time.TimeOnly))
	return nil
}
