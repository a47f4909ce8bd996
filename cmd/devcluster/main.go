// Command devcluster runs a local GPU cluster in one process: a real
// kube-apiserver on an embedded etcd, simulated GPU nodes with dcgm-exporter
// endpoints, a pod runner standing in for kubelets, the stock kube-scheduler,
// and optionally a trace replayed into it. It writes a kubeconfig that
// kubectl, client-go programs and other schedulers can use.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/player"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/trace"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		os.Exit(1)
	}
}

type config struct {
	inventory, inventoryFormat string
	nodes                      int
	gpusPerNode                int
	gpuModel                   string
	fanout                     string
	traceFile, traceFormat     string
	jobs, limit                int
	seed                       uint64
	speed                      float64
	dir, kubeconfig            string
	scheduler, exitWhenDone    bool
	heartbeat                  time.Duration
	verbose                    bool
	gangAPI                    string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("devcluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.inventory, "inventory", "", "node inventory: inventory YAML, openb node CSV or Philly machine list (empty: -nodes generated nodes)")
	fs.StringVar(&c.inventoryFormat, "inventory-format", "", "inventory format: yaml, openb or philly (empty: detect)")
	fs.IntVar(&c.nodes, "nodes", 16, "number of generated nodes when -inventory is empty")
	fs.IntVar(&c.gpusPerNode, "gpus-per-node", 8, "GPUs per generated node")
	fs.StringVar(&c.gpuModel, "gpu-model", "NVIDIA-H100-80GB-HBM3", "GPU model label of generated nodes")
	fs.StringVar(&c.fanout, "fanout", "1,2,4", "units per topology level above the host (spine,rack,nvlink-domain) for generated and CSV nodes")
	fs.StringVar(&c.traceFile, "trace", "", "job trace to replay: job YAML/CSV, openb pod CSV or pollux_philly.csv (empty: -jobs generated jobs)")
	fs.StringVar(&c.traceFormat, "trace-format", "", "trace format: yaml, csv, openb or philly (empty: detect)")
	fs.IntVar(&c.jobs, "jobs", 0, "number of seeded generated jobs to replay when -trace is empty (0: none)")
	fs.IntVar(&c.limit, "limit", 0, "replay only the first N jobs by arrival (0: all)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of generated jobs")
	fs.Float64Var(&c.speed, "speed", 60, "trace seconds per wall second")
	fs.StringVar(&c.dir, "dir", "", "data directory for etcd (empty: a temporary directory removed on exit)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "devcluster.kubeconfig", "where to write the kubeconfig")
	fs.BoolVar(&c.scheduler, "scheduler", true, "run the stock kube-scheduler in this process (false: bring your own)")
	fs.BoolVar(&c.exitWhenDone, "exit-when-done", false, "exit once every trace job has ended instead of serving until interrupted")
	fs.DurationVar(&c.heartbeat, "heartbeat", 10*time.Second, "wall interval of node heartbeats")
	fs.BoolVar(&c.verbose, "v", false, "log apiserver, etcd and scheduler output to stderr")
	fs.StringVar(&c.gangAPI, "gang-api", string(podgroup.APIWorkload), "how replayed jobs are declared as gangs: workload (Kubernetes Workload API, scheduling.k8s.io/v1beta1: a Workload, its PodGroup, pods' spec.schedulingGroup) or podgroup (scheduler-plugins PodGroup CRD and pod label)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return c, nil
}

func parseFanout(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("flag -fanout: %q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func loadInventory(c config, fanout []int) (trace.Inventory, error) {
	if c.inventory != "" {
		return trace.LoadInventory(c.inventory, trace.Format(c.inventoryFormat), nil, fanout)
	}
	if c.nodes < 1 {
		return trace.Inventory{}, fmt.Errorf("flag -nodes: %d is below 1", c.nodes)
	}
	nodes := make([]trace.Node, c.nodes)
	for i := range nodes {
		nodes[i] = trace.Node{Name: fmt.Sprintf("gpu-%03d", i), GPUs: c.gpusPerNode, GPUModel: c.gpuModel}
	}
	if err := trace.AssignTopology(nodes, "dc", trace.DefaultLevels, fanout); err != nil {
		return trace.Inventory{}, err
	}
	return trace.Inventory{Levels: trace.DefaultLevels, Nodes: nodes}, nil
}

func loadJobs(c config) ([]trace.Job, error) {
	var jobs []trace.Job
	switch {
	case c.traceFile != "":
		var err error
		if jobs, err = trace.LoadJobs(c.traceFile, trace.Format(c.traceFormat)); err != nil {
			return nil, err
		}
	case c.jobs > 0:
		jobs = trace.Generate(trace.GenConfig{Seed: c.seed, Jobs: c.jobs})
	}
	trace.SortByArrival(jobs)
	if c.limit > 0 && len(jobs) > c.limit {
		jobs = jobs[:c.limit]
	}
	return jobs, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	fanout, err := parseFanout(c.fanout)
	if err != nil {
		return err
	}
	gangAPI, err := podgroup.ParseAPI(c.gangAPI)
	if err != nil {
		return fmt.Errorf("flag -gang-api: %w", err)
	}
	inv, err := loadInventory(c, fanout)
	if err != nil {
		return err
	}
	jobs, err := loadJobs(c)
	if err != nil {
		return err
	}
	clock, err := harness.NewClock(c.speed)
	if err != nil {
		return fmt.Errorf("flag -speed: %w", err)
	}
	opts := harness.Options{Dir: c.dir, Kubeconfig: c.kubeconfig, WorkloadAPI: gangAPI == podgroup.APIWorkload}
	if c.verbose {
		opts.Log = stderr
	}
	cluster, err := harness.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer cluster.Stop()
	fmt.Fprintf(stdout, "apiserver up in %v; kubeconfig %s\n", cluster.StartupTime.Round(time.Millisecond), cluster.Kubeconfig)
	nodes, err := cluster.AddNodes(ctx, inv.Nodes, harness.NodeOptions{Clock: clock, Heartbeat: c.heartbeat})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d nodes registered; topology levels %s\n", len(inv.Nodes), strings.Join(inv.Levels, " > "))
	for i, n := range inv.Nodes {
		if i == 3 {
			fmt.Fprintf(stdout, "  ... (every node carries annotation %s)\n", harness.AnnotationExporter)
			break
		}
		fmt.Fprintf(stdout, "  %s exporter %s\n", n.Name, nodes.ExporterURL(n.Name))
	}
	if c.scheduler {
		if _, err := cluster.StartScheduler(ctx, harness.SchedulerOptions{}); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "kube-scheduler running")
	}
	if len(jobs) > 0 {
		p, err := player.New(cluster.Client, cluster.Dynamic, jobs, player.Options{Clock: clock, GangAPI: gangAPI})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "replaying %d jobs at %gx\n", len(jobs), c.speed)
		rep, err := p.Run(ctx)
		if err != nil && ctx.Err() == nil {
			return err
		}
		done := 0
		for _, r := range rep.Jobs {
			if r.Done() {
				done++
			}
		}
		fmt.Fprintf(stdout, "%d of %d jobs ended in %v (%.1f jobs/s)\n", done, len(jobs), rep.Ended.Sub(rep.Began).Round(time.Millisecond), rep.JobsPerSecond())
		if c.exitWhenDone || ctx.Err() != nil {
			return nil
		}
	} else if c.exitWhenDone {
		return nil
	}
	fmt.Fprintf(stdout, "serving; try: kubectl --kubeconfig %s get nodes\n", cluster.Kubeconfig)
	<-ctx.Done()
	return nil
}
