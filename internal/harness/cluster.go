// Package harness stands a realistic GPU cluster up inside one Go process: a
// real kube-apiserver on an embedded etcd, simulated GPU nodes kept Ready by a
// heartbeat, a pod runner standing in for the kubelets, simulated
// dcgm-exporter endpoints (package exporter) and, on request, the stock
// kube-scheduler or one built with schedloop's plugins. Package player feeds
// it traces.
//
// It is the one way schedloop's tests and demo get a cluster. It holds no
// scheduling logic and writes nothing outside its own directory.
package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	apiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/utils/ktesting"

	"github.com/schedloop/schedloop/internal/podgroup"
)

// Options configure a Cluster. The zero value is a quiet cluster in a fresh
// temporary directory.
type Options struct {
	// Dir holds etcd's data and the kubeconfig. Empty: a new temporary
	// directory, removed by Stop.
	Dir string
	// Kubeconfig is where to write a kubeconfig for client-go, kubectl and the
	// scheduler. Empty: Dir/kubeconfig.
	Kubeconfig string
	// Log receives the apiserver's, etcd's and klog's output. Nil discards it.
	// klog is process-wide: the last Start decides where it goes.
	Log io.Writer
	// WorkloadAPI serves the Kubernetes Workload API (scheduling.k8s.io/v1beta1)
	// and turns its feature gate GenericWorkload on, so gangs can be declared
	// as Workloads and their PodGroups. The gate is process-wide: once a
	// cluster of a process asks for it, every later cluster and scheduler of
	// that process serves and runs with it. It is off by default because kube-scheduler
	// 1.37 places pods markedly slower with it on (a 200-job replay through
	// the stock profile, TestReplayTraceWithStockScheduler, no longer ends
	// within its minute).
	WorkloadAPI bool
}

// Cluster is a running kube-apiserver backed by an embedded etcd, with the
// PodGroup CRD installed.
type Cluster struct {
	Config      *rest.Config // loopback admin credentials; QPS 1000
	Client      kubernetes.Interface
	Dynamic     dynamic.Interface
	Kubeconfig  string        // path of the kubeconfig written at start-up
	Dir         string        // data directory
	StartupTime time.Duration // from Start until the API served the PodGroup CRD

	stopOnce sync.Once
	stops    []func() // run in reverse order by Stop

	claimOnce sync.Once // the ResourceClaim controller, started by the first DRA nodes
	claimErr  error
}

// Start brings etcd and the kube-apiserver up, installs the PodGroup CRD and
// writes the kubeconfig. Stop tears everything down.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	began := time.Now()
	quietKlog(opts.Log)
	c = &Cluster{Dir: opts.Dir}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "schedloop-harness-")
		if err != nil {
			return nil, fmt.Errorf("make data dir: %w", err)
		}
		c.Dir = dir
		c.stops = append(c.stops, func() { os.RemoveAll(dir) })
	}
	etcdURL, stopEtcd, err := startEtcd(filepath.Join(c.Dir, "etcd"), opts.Log)
	if err != nil {
		return nil, err
	}
	c.stops = append(c.stops, stopEtcd)

	if err := c.startAPIServer(ctx, etcdURL, opts.Log, opts.WorkloadAPI); err != nil {
		return nil, err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	if err := podgroup.InstallCRD(ctx, c.Config); err != nil {
		return nil, err
	}
	c.Kubeconfig = opts.Kubeconfig
	if c.Kubeconfig == "" {
		c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	}
	if err := WriteKubeconfig(c.Kubeconfig, c.Config); err != nil {
		return nil, err
	}
	c.StartupTime = time.Since(began)
	return c, nil
}

// NewForTest starts a Cluster for t, fails t if it cannot, and stops it when
// t ends. Each call gets its own ports and directory, so parallel tests do
// not collide.
func NewForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	c, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// Stop shuts the apiserver and etcd down and removes what Start created.
// It is safe to call more than once.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		for i := len(c.stops) - 1; i >= 0; i-- {
			c.stops[i]()
		}
	})
}

// onStop registers f to run at Stop, before everything registered earlier.
func (c *Cluster) onStop(f func()) { c.stops = append(c.stops, f) }

// apiserverFlags keep start-up lean: no endpoint reconciler, and no
// admission plugins that need controllers this process does not run.
var apiserverFlags = []string{
	"--endpoint-reconciler-type=none",
	"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
}

// workloadAPIFeatures are the feature gates Options.WorkloadAPI turns on:
// GenericWorkload serves the Workload API (Workload, PodGroup, pods'
// spec.schedulingGroup) and has kube-scheduler place a Workload API gang in
// one pod-group cycle with its GangScheduling plugin.
var workloadAPIFeatures = map[string]bool{"GenericWorkload": true}

var (
	featuresMu sync.Mutex
	featuresOn bool
)

// workloadAPIOn turns workloadAPIFeatures on for the process when asked
// to, once, and never off, and reports whether they are on. Both the
// apiserver and kube-scheduler read the process-wide gate; undoing it when
// one cluster stops would pull it from under another still running beside
// it. Once it is on, every later apiserver of the process must serve the
// API too: a scheduler with the gate on waits at start-up for the
// PodGroups it then watches.
func workloadAPIOn(ask bool) (bool, error) {
	featuresMu.Lock()
	defer featuresMu.Unlock()
	if featuresOn || !ask {
		return featuresOn, nil
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(workloadAPIFeatures); err != nil {
		return false, fmt.Errorf("enable feature gates %v: %w", workloadAPIFeatures, err)
	}
	featuresOn = true
	return true, nil
}

func (c *Cluster) startAPIServer(ctx context.Context, etcdURL string, log io.Writer, workloadAPI bool) error {
	flags := apiserverFlags
	on, err := workloadAPIOn(workloadAPI)
	if err != nil {
		return err
	}
	if on {
		// Beta APIs are off by default: scheduling.k8s.io/v1beta1 is asked for.
		flags = append(slices.Clip(flags), "--runtime-config="+podgroup.WorkloadGroupVersion+"=true")
	}
	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{etcdURL}
	tb := &processTB{name: "schedloop-harness", dir: c.Dir, log: log}
	tCtx := ktesting.InitCtx(klog.NewContext(ctx, klog.Background()), tb)
	var server apiservertesting.TestServer
	func() {
		defer tb.recoverFatal(&err)
		server, err = apiservertesting.StartTestServer(tCtx, &apiservertesting.TestServerInstanceOptions{
			DisableInvariantChecks: true,
		}, flags, storage)
	}()
	// The test server registers part of its own teardown through Cleanup.
	c.onStop(tb.runCleanups)
	if err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	c.onStop(server.TearDownFn)
	c.Config = server.ClientConfig
	return nil
}

// startEtcd runs an embedded single-member etcd in dir on free loopback ports.
func startEtcd(dir string, log io.Writer) (clientURL string, stop func(), err error) {
	// Free ports are found by binding and releasing them; another process may
	// take one in between, so try a few times.
	for attempt := 0; attempt < 5; attempt++ {
		clientURL, stop, err = tryStartEtcd(dir, log)
		if err == nil || !isAddrInUse(err) {
			return clientURL, stop, err
		}
		os.RemoveAll(dir)
	}
	return "", nil, err
}

func tryStartEtcd(dir string, log io.Writer) (string, func(), error) {
	ports, err := freePorts(2)
	if err != nil {
		return "", nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "harness"
	cfg.Dir = dir
	cfg.UnsafeNoFsync = true // a throw-away single member; durability does not matter
	client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	logger := zap.NewNop()
	if log != nil {
		logger = zap.New(zapCore(log))
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return "", nil, fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return "", nil, fmt.Errorf("start etcd: %w", err)
	case <-time.After(time.Minute):
		e.Close()
		return "", nil, errors.New("start etcd: not ready after a minute")
	}
	return client.String(), e.Close, nil
}

func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

func zapCore(w io.Writer) zapcore.Core {
	return zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(w), zapcore.WarnLevel)
}

// WriteKubeconfig writes a kubeconfig for cfg (server, CA, TLS server name,
// bearer token) that client-go, kubectl and kube-scheduler accept.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["harness"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.TLSClientConfig.CAData,
		TLSServerName:            cfg.TLSClientConfig.ServerName,
		InsecureSkipTLSVerify:    cfg.TLSClientConfig.Insecure,
	}
	kc.AuthInfos["harness-admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["harness"] = &clientcmdapi.Context{Cluster: "harness", AuthInfo: "harness-admin"}
	kc.CurrentContext = "harness"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

var klogMu sync.Mutex

// quietKlog routes klog, which the apiserver and scheduler log through, to w
// or nowhere.
func quietKlog(w io.Writer) {
	klogMu.Lock()
	defer klogMu.Unlock()
	if w == nil {
		klog.SetLogger(logr.Discard())
		return
	}
	klog.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(w))))
}
