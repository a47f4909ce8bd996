package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/election"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/store"
)

// urlList is a repeatable URL flag.
type urlList []string

func (u *urlList) String() string { return strings.Join(*u, ",") }
func (u *urlList) Set(v string) error {
	p, err := url.Parse(v)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL of a dcgm-exporter /metrics page", v)
	}
	*u = append(*u, v)
	return nil
}

// targetLimits is the repeatable -scrape-target-limits flag: limits for one
// target, "URL,sample_limit=N,body_limit=BYTES", either limit optional.
type targetLimits map[string]dcgm.Limits

func (t targetLimits) String() string {
	var parts []string
	for u, l := range t {
		parts = append(parts, fmt.Sprintf("%s,sample_limit=%d,body_limit=%d", u, l.SampleLimit, l.MaxBodyBytes))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

func (t targetLimits) Set(v string) error {
	target, rest, _ := strings.Cut(v, ",")
	var u urlList
	if err := u.Set(target); err != nil {
		return err
	}
	if rest == "" {
		return fmt.Errorf("%q names no limit: want URL,sample_limit=N,body_limit=BYTES", v)
	}
	var l dcgm.Limits
	for kv := range strings.SplitSeq(rest, ",") {
		k, val, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("%q in %q: want sample_limit=N or body_limit=BYTES with N, BYTES > 0", kv, v)
		}
		switch k {
		case "sample_limit":
			l.SampleLimit = int(n)
		case "body_limit":
			l.MaxBodyBytes = n
		default:
			return fmt.Errorf("%q in %q: unknown limit %q (want sample_limit or body_limit)", kv, v, k)
		}
	}
	t[target] = l
	return nil
}

// collectConfig is what the collection flags gather.
type collectConfig struct {
	kubeconfig        string
	exporterURLs      urlList
	exporterNamespace string
	exporterService   string
	exporterSelector  string
	exporterPort      int
	scrapeInterval    time.Duration
	bufferSamples     int
	batchSamples      int
	ingestWriters     int
	scrapeTimeout     time.Duration
	sampleLimit       int
	bodyLimit         int64
	targetLimits      targetLimits
	spoolDir          string
	spoolMaxBytes     int64
	idleThreshold     float64
	hostEngine        string
	rollupEvery       time.Duration
	etaEvery          time.Duration
	etaDebounce       time.Duration
	etaAnnotateQPS    float64
	leaderElect       bool
	lease             election.Config
}

func registerCollectFlags(fs *flag.FlagSet, getenv func(string) string) *collectConfig {
	c := &collectConfig{targetLimits: targetLimits{}}
	fs.StringVar(&c.kubeconfig, "kubeconfig", getenv("KUBECONFIG"),
		"kubeconfig of the cluster to watch (default: in-cluster service account, then $KUBECONFIG); \"off\" watches no cluster")
	fs.Var(&c.exporterURLs, "dcgm-exporter-url", "dcgm-exporter /metrics URL to scrape (repeatable); adds to the discovered targets")
	fs.StringVar(&c.exporterNamespace, "exporter-namespace", "", "namespace of the dcgm-exporter Service or pods to discover (empty: all)")
	fs.StringVar(&c.exporterService, "exporter-service", "", "dcgm-exporter Service whose EndpointSlices list the targets (e.g. nvidia-dcgm-exporter)")
	fs.StringVar(&c.exporterSelector, "exporter-selector", "", "label selector of dcgm-exporter pods, for installs without a Service (e.g. app=nvidia-dcgm-exporter)")
	fs.IntVar(&c.exporterPort, "exporter-port", dcgm.DefaultExporterPort, "dcgm-exporter port on pods found with -exporter-selector")
	fs.DurationVar(&c.scrapeInterval, "scrape-interval", collector.DefaultScrapeEvery, "how often GPU telemetry is collected")
	fs.IntVar(&c.bufferSamples, "buffer-samples", collector.DefaultBufferSamples, "GPU samples held in memory while Postgres is slow or away")
	fs.IntVar(&c.batchSamples, "batch-samples", collector.DefaultBatchSamples, "most GPU samples sent in one COPY")
	fs.IntVar(&c.ingestWriters, "ingest-writers", collector.DefaultWriters, "COPYs of GPU samples run at once (each holds a Postgres connection)")
	fs.DurationVar(&c.scrapeTimeout, "scrape-timeout", dcgm.DefaultScrapeTimeout, "longest one dcgm-exporter scrape may take, connect, read and parse (at most -scrape-interval)")
	fs.IntVar(&c.sampleLimit, "sample-limit", dcgm.DefaultSampleLimit, "most series a dcgm-exporter page may hold, stored families or not (Prometheus's sample_limit); a page over it is not stored")
	fs.Int64Var(&c.bodyLimit, "scrape-body-limit", dcgm.DefaultMaxBodyBytes, "largest dcgm-exporter page in bytes, counted after decompression; a page over it is not stored")
	fs.Var(c.targetLimits, "scrape-target-limits", "limits for one target, overriding -sample-limit and -scrape-body-limit: URL,sample_limit=N,body_limit=BYTES (repeatable)")
	fs.StringVar(&c.spoolDir, "spool-dir", "", "directory for samples that do not fit in memory while Postgres is away, and for what is buffered at exit (empty: no spool)")
	fs.Int64Var(&c.spoolMaxBytes, "spool-max-bytes", collector.DefaultSpoolMaxBytes, "size limit of -spool-dir")
	fs.Float64Var(&c.idleThreshold, "idle-threshold", store.DefaultIdleThreshold, "engine activity (0..1) below which a GPU held by a pod counts as allocated but idle")
	fs.StringVar(&c.hostEngine, "dcgm-hostengine", "off", "read GPUs through go-dcgm: \"embedded\", a standalone nv-hostengine address (host:port), or \"off\"")
	fs.DurationVar(&c.rollupEvery, "rollup-interval", collector.DefaultRollupEvery, "how often closed minutes are rolled up into the idle and demand tables")
	fs.DurationVar(&c.etaEvery, "eta-interval", collector.DefaultETAEvery, "how often every pending job's start is estimated, stored (to measure the estimates later) and counted in schedloop_eta_pending_jobs; 0 turns it off")
	fs.Float64Var(&c.etaAnnotateQPS, "eta-annotate-qps", collector.DefaultETAAnnotateQPS, "most pod patches a second that write each pending job's estimate onto its waiting pods (annotation schedloop.io/eta, patched only when it moves materially); 0 turns the annotation off")
	fs.DurationVar(&c.etaDebounce, "eta-debounce", collector.DefaultETADebounce, "how long after a pod is created, bound or ends, or a profile is applied, the estimates are made again (at most once per this; between -eta-interval's)")
	fs.BoolVar(&c.leaderElect, "leader-elect", false, "run as one of several replicas: only the holder of a coordination.k8s.io Lease scrapes and rolls up; the others keep their informers listed and take over when it goes")
	fs.StringVar(&c.lease.Lease, "leader-elect-lease", "schedloop-collector", "name of the Lease that elects the active collector")
	fs.StringVar(&c.lease.Namespace, "leader-elect-namespace", cmpOr(getenv("POD_NAMESPACE"), "default"), "namespace of the Lease ($POD_NAMESPACE when set)")
	host, _ := os.Hostname()
	fs.StringVar(&c.lease.Identity, "leader-elect-identity", cmpOr(getenv("POD_NAME"), host), "this replica's name in the Lease ($POD_NAME when set, else the host name)")
	fs.DurationVar(&c.lease.LeaseDuration, "leader-elect-lease-duration", 10*time.Second, "how long a Lease not renewed keeps standbys waiting; keep it plus -leader-elect-retry-period under -scrape-interval, so a takeover misses at most one scrape of an exporter")
	fs.DurationVar(&c.lease.RenewDeadline, "leader-elect-renew-deadline", 7*time.Second, "how long the active collector tries to renew its Lease before it stops scraping")
	fs.DurationVar(&c.lease.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often replicas try to take or renew the Lease")
	return c
}

func cmpOr(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func (c *collectConfig) validate() error {
	switch {
	case c.scrapeInterval <= 0:
		return fmt.Errorf("flag -scrape-interval %v: want a positive duration", c.scrapeInterval)
	case c.bufferSamples <= 0:
		return fmt.Errorf("flag -buffer-samples %d: want a positive number", c.bufferSamples)
	case c.batchSamples <= 0:
		return fmt.Errorf("flag -batch-samples %d: want a positive number", c.batchSamples)
	case c.ingestWriters <= 0:
		return fmt.Errorf("flag -ingest-writers %d: want a positive number", c.ingestWriters)
	case c.scrapeTimeout <= 0:
		return fmt.Errorf("flag -scrape-timeout %v: want a positive duration", c.scrapeTimeout)
	case c.sampleLimit <= 0:
		return fmt.Errorf("flag -sample-limit %d: want a positive number", c.sampleLimit)
	case c.bodyLimit <= 0:
		return fmt.Errorf("flag -scrape-body-limit %d: want a positive number of bytes", c.bodyLimit)
	case c.spoolMaxBytes <= 0:
		return fmt.Errorf("flag -spool-max-bytes %d: want a positive number", c.spoolMaxBytes)
	case !(c.idleThreshold > 0 && c.idleThreshold <= 1):
		return fmt.Errorf("flag -idle-threshold %v: want a number in (0, 1]", c.idleThreshold)
	case c.etaEvery < 0:
		return fmt.Errorf("flag -eta-interval %v: want a positive duration, or 0 for none", c.etaEvery)
	case c.etaAnnotateQPS < 0:
		return fmt.Errorf("flag -eta-annotate-qps %v: want a positive number, or 0 for none", c.etaAnnotateQPS)
	case c.etaDebounce <= 0:
		return fmt.Errorf("flag -eta-debounce %v: want a positive duration", c.etaDebounce)
	case c.rollupEvery <= 0:
		return fmt.Errorf("flag -rollup-interval %v: want a positive duration", c.rollupEvery)
	case c.leaderElect && !(c.lease.RetryPeriod > 0 && c.lease.RetryPeriod < c.lease.RenewDeadline && c.lease.RenewDeadline < c.lease.LeaseDuration):
		return fmt.Errorf("flags -leader-elect-retry-period %v, -leader-elect-renew-deadline %v, -leader-elect-lease-duration %v: want 0 < retry period < renew deadline < lease duration",
			c.lease.RetryPeriod, c.lease.RenewDeadline, c.lease.LeaseDuration)
	case c.exporterPort <= 0 || c.exporterPort > 65535:
		return fmt.Errorf("flag -exporter-port %d: want a TCP port", c.exporterPort)
	}
	return nil
}

// restConfig finds the cluster: in-cluster first, then -kubeconfig; nil when
// there is none (the collector then records telemetry only).
func (c *collectConfig) restConfig() (*rest.Config, error) {
	if c.kubeconfig == "off" {
		return nil, nil
	}
	if c.kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, nil
		}
		return cfg, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("flag -kubeconfig %q: %w", c.kubeconfig, err)
	}
	return cfg, nil
}

// multiLister joins static and discovered targets.
type multiLister []dcgm.TargetLister

func (m multiLister) ListTargets(ctx context.Context) ([]string, error) {
	var all []string
	var errs []error
	for _, l := range m {
		t, err := l.ListTargets(ctx)
		all = append(all, t...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return all, errors.Join(errs...)
}

// startCollection wires the collection flags to a running collector
// pipeline and registers its metrics on reg.
func (c *collectConfig) start(ctx context.Context, s *store.Store, reg prometheus.Registerer, nodeName string, stderr io.Writer) (*collector.Pipeline, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, err := c.restConfig()
	if err != nil {
		return nil, err
	}
	var client kubernetes.Interface
	var dyn dynamic.Interface
	if cfg != nil {
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			return nil, fmt.Errorf("flag -kubeconfig %q: kubernetes client: %w", c.kubeconfig, err)
		}
		if dyn, err = dynamic.NewForConfig(cfg); err != nil {
			return nil, fmt.Errorf("flag -kubeconfig %q: dynamic client: %w", c.kubeconfig, err)
		}
	}

	ingest := collector.IngestOptions{BufferSamples: c.bufferSamples, BatchSamples: c.batchSamples, Writers: c.ingestWriters,
		SpoolDir: c.spoolDir, SpoolMaxBytes: c.spoolMaxBytes}
	pc := collector.PipelineConfig{Store: s, ScrapeEvery: c.scrapeInterval, Ingest: ingest,
		RollupThreshold: c.idleThreshold, RollupEvery: c.rollupEvery, ETAEvery: etaEvery(c.etaEvery), ETADebounce: c.etaDebounce, ETAAnnotateQPS: c.etaAnnotateQPS, Registerer: reg, Logger: log}
	targets := multiLister{dcgm.StaticTargets(c.exporterURLs)}
	if client != nil && c.exporterService != "" {
		targets = append(targets, &dcgm.EndpointSliceTargets{Client: client, Namespace: c.exporterNamespace, Service: c.exporterService})
	}
	if client != nil && c.exporterSelector != "" {
		targets = append(targets, &dcgm.PodTargets{Client: client, Namespace: c.exporterNamespace, LabelSelector: c.exporterSelector, Port: c.exporterPort})
	}
	if (c.exporterService != "" || c.exporterSelector != "") && client == nil {
		return nil, fmt.Errorf("flags -exporter-service/-exporter-selector need a cluster: set -kubeconfig or run in a pod")
	}
	if len(c.exporterURLs) > 0 || len(targets) > 1 {
		pc.Scraper = &dcgm.ExporterScraper{Targets: targets, Timeout: min(c.scrapeInterval, c.scrapeTimeout),
			Limits: dcgm.Limits{SampleLimit: c.sampleLimit, MaxBodyBytes: c.bodyLimit}, TargetLimits: c.targetLimits}
	}
	switch c.hostEngine {
	case "off", "":
	default:
		hc := dcgm.HostEngineConfig{Mode: dcgm.Embedded, Node: nodeName}
		if c.hostEngine != "embedded" {
			hc.Mode, hc.Address = dcgm.Standalone, c.hostEngine
		}
		eng, err := dcgm.StartHostEngine(hc)
		if err != nil {
			return nil, fmt.Errorf("flag -dcgm-hostengine %q: %w", c.hostEngine, err)
		}
		pc.Sources, pc.SourcesStopped = []collector.Source{eng}, func() { eng.Close() }
	}
	if client != nil {
		pc.Watch = &events.WatchOptions{Client: client, Dynamic: dyn}
	}
	if c.leaderElect {
		if client == nil {
			return nil, errors.New("flag -leader-elect needs a cluster for its Lease: set -kubeconfig or run in a pod")
		}
		lease := c.lease
		pc.Elect = func(ctx context.Context, lead func(context.Context)) error {
			return election.Run(ctx, client, lease, lead)
		}
	}
	p, err := collector.StartPipeline(ctx, pc)
	if err != nil {
		if pc.SourcesStopped != nil {
			pc.SourcesStopped()
		}
		if errors.Is(err, collector.ErrSpool) {
			return nil, fmt.Errorf("flag -spool-dir %q: %w", c.spoolDir, err)
		}
		return nil, err
	}
	log.Info("collection started", "telemetry_sources", p.Sources(), "cluster", cfg != nil, "ingest", fmt.Sprint(ingest))
	return p, nil
}

// etaEvery maps the flag's 0 (none) onto the pipeline's negative.
func etaEvery(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
