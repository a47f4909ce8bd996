package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	utilcompatibility "k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/compatibility"
	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
)

// DefaultSchedulerConfig is the stock kube-scheduler profile with leader
// election off. %s is the kubeconfig path.
const DefaultSchedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: %s
  qps: 500
  burst: 1000
`

// SchedulerOptions configure an in-process kube-scheduler.
type SchedulerOptions struct {
	// Config is a KubeSchedulerConfiguration YAML. Empty: DefaultSchedulerConfig.
	// Its clientConnection.kubeconfig should be the cluster's Kubeconfig.
	Config string
	// Plugins registers out-of-tree plugins, as app.WithPlugin does for a
	// scheduler binary.
	Plugins []app.Option
	// Setup, when set, is handed the scheduler before it runs: a test that
	// steps the scheduler wraps its exported hooks there (NextEntity,
	// FailureHandler) to see where its cycles stand.
	Setup func(*scheduler.Scheduler)
}

// Scheduler is a kube-scheduler running in this process.
type Scheduler struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// schedulerMu admits one in-process scheduler at a time: kube-scheduler
// registers process-wide state (configz) that a second one would collide with.
var schedulerMu sync.Mutex

// StartScheduler runs kube-scheduler against the cluster until Stop (or the
// cluster's Stop). Only one runs per process at a time; a second call waits
// for the first to stop.
func (c *Cluster) StartScheduler(ctx context.Context, opts SchedulerOptions) (*Scheduler, error) {
	cfg := opts.Config
	if cfg == "" {
		cfg = fmt.Sprintf(DefaultSchedulerConfig, c.Kubeconfig)
	}
	path := filepath.Join(c.Dir, "scheduler-config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, fmt.Errorf("write scheduler config: %w", err)
	}
	schedulerMu.Lock()
	o := options.NewOptions()
	o.ConfigFile = path
	o.SecureServing.BindPort = 0 // no /healthz or /metrics listener
	// A registry of our own, so parallel components do not share flag state.
	featureGate := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	version := utilcompatibility.DefaultKubeEffectiveVersionForTest()
	version.SetEmulationVersion(featureGate.EmulationVersion())
	version.SetMinCompatibilityVersion(featureGate.MinCompatibilityVersion())
	o.ComponentGlobalsRegistry = compatibility.NewComponentGlobalsRegistry()
	if err := o.ComponentGlobalsRegistry.Register(compatibility.DefaultKubeComponent, version, featureGate); err != nil {
		schedulerMu.Unlock()
		return nil, fmt.Errorf("scheduler component registry: %w", err)
	}
	if err := o.ComponentGlobalsRegistry.Set(); err != nil {
		schedulerMu.Unlock()
		return nil, fmt.Errorf("scheduler component registry: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	cc, sched, err := app.Setup(ctx, o, opts.Plugins...)
	if err != nil {
		cancel()
		schedulerMu.Unlock()
		return nil, fmt.Errorf("set up kube-scheduler: %w", err)
	}
	if opts.Setup != nil {
		opts.Setup(sched)
	}
	s := &Scheduler{cancel: cancel, done: make(chan error, 1)}
	go func() {
		err := app.Run(ctx, cc, sched)
		configz.Delete("componentconfig")
		schedulerMu.Unlock()
		s.done <- err
	}()
	c.onStop(s.Stop)
	return s, nil
}

// Stop ends the scheduler and waits for it to exit.
func (s *Scheduler) Stop() {
	s.once.Do(func() {
		s.cancel()
		<-s.done
	})
}
