// Package kueue runs Kueue (sigs.k8s.io/kueue v0.19) in this process against a
// harness cluster: its CRDs installed, its core controllers and its scheduler
// in a controller-runtime manager, as Kueue's own integration tests run them.
// Kueue admits; the scheduler the harness runs places. Gangs reach Kueue as
// Workloads created beside their pods (gang.go).
//
// It must not place pods, decide admissions or replay Kueue: every admission,
// preemption and quota decision is Kueue's own code.
package kueue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueueapi "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	qcache "sigs.k8s.io/kueue/pkg/cache/queue"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/constants"
	"sigs.k8s.io/kueue/pkg/controller/core"
	"sigs.k8s.io/kueue/pkg/controller/core/indexer"
	"sigs.k8s.io/kueue/pkg/scheduler"
	preemptexpectations "sigs.k8s.io/kueue/pkg/scheduler/preemption/expectations"

	"github.com/schedloop/schedloop/internal/podgroup"
)

// Module is the Kueue module whose code and CRDs run here.
const Module = "sigs.k8s.io/kueue"

// Options configure Kueue.
type Options struct {
	// FairSharing turns on Kueue's fair sharing (Configuration.fairSharing
	// with its default preemption strategies). Off: classic cohort
	// borrowing and reclaim only.
	FairSharing bool
	// CRDDir holds Kueue's CustomResourceDefinitions. Empty: the module's
	// config/components/crd/bases, found with `go list -m`.
	CRDDir string
}

// Kueue is Kueue's manager running in this process.
type Kueue struct {
	// Client reads and writes through the manager's cache, as Kueue's
	// controllers do.
	Client client.Client
	cancel context.CancelFunc
	done   chan error
}

// Scheme holds the Kubernetes types and Kueue's v1beta2 API.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kueueapi.AddToScheme, configapi.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("kueue scheme: %w", err)
		}
	}
	return s, nil
}

// Start installs Kueue's CRDs and runs its controllers, its scheduler and
// the gang integration until Stop or ctx ends.
func Start(ctx context.Context, cfg *rest.Config, opts Options) (k *Kueue, err error) {
	if err := InstallCRDs(ctx, cfg, opts.CRDDir); err != nil {
		return nil, err
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	// Kueue's types have no protobuf encoding; a harness config asks for it.
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Controller names are process-wide in controller-runtime; a second
		// Kueue in one test binary would otherwise be refused.
		Controller: crconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("kueue manager: %w", err)
	}
	configuration := &configapi.Configuration{}
	if opts.FairSharing {
		configuration.FairSharing = &configapi.FairSharing{}
	}
	scheme.Default(configuration)

	runCtx, cancel := context.WithCancel(ctx)
	defer func() {
		if err != nil {
			cancel()
		}
	}()
	if err := indexer.Setup(runCtx, mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("kueue indexes: %w", err)
	}
	cCache := schdcache.New(mgr.GetClient(), schdcache.WithFairSharing(opts.FairSharing))
	requeuer := qcache.NewRequeuer()
	if err := mgr.Add(requeuer); err != nil {
		return nil, fmt.Errorf("kueue requeuer: %w", err)
	}
	expectations := preemptexpectations.New()
	queues := qcache.NewManager(mgr.GetClient(), cCache, requeuer, qcache.WithPreemptionExpectations(expectations))
	if failed, err := core.SetupControllers(mgr, queues, cCache, configuration,
		core.SetupControllersOpts{PreemptionExpectations: expectations}); err != nil {
		return nil, fmt.Errorf("kueue controller %s: %w", failed, err)
	}
	if err := setupGangs(mgr); err != nil {
		return nil, err
	}
	sched := scheduler.New(queues, cCache, mgr.GetClient(), mgr.GetEventRecorder(constants.AdmissionName),
		scheduler.WithFairSharing(configuration.FairSharing),
		scheduler.WithPreemptionExpectations(expectations))
	if err := mgr.Add(sched); err != nil {
		return nil, fmt.Errorf("kueue scheduler: %w", err)
	}
	go queues.CleanUpOnContext(runCtx)
	go cCache.CleanUpOnContext(runCtx)

	k = &Kueue{Client: mgr.GetClient(), cancel: cancel, done: make(chan error, 1)}
	go func() { k.done <- mgr.Start(runCtx) }()
	if !mgr.GetCache().WaitForCacheSync(runCtx) {
		return nil, errors.New("kueue manager: caches did not sync")
	}
	return k, nil
}

// Stop ends the manager and waits for it.
func (k *Kueue) Stop() error {
	k.cancel()
	return <-k.done
}

// InstallCRDs creates Kueue's CustomResourceDefinitions from dir (empty: the
// module's own) and waits until the apiserver serves them.
func InstallCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	if dir == "" {
		mod, err := ModuleDir()
		if err != nil {
			return err
		}
		dir = filepath.Join(mod, "config", "components", "crd", "bases")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("kueue CRDs: no *.yaml in %s (%v)", dir, err)
	}
	cl, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("apiextensions client: %w", err)
	}
	crds := cl.ApiextensionsV1().CustomResourceDefinitions()
	var names []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("kueue CRD: %w", err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			return fmt.Errorf("kueue CRD %s: %w", f, err)
		}
		if _, err := crds.Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create kueue CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	for _, name := range names {
		if err := podgroup.WaitEstablished(ctx, crds, name); err != nil {
			return fmt.Errorf("wait for kueue CRD %s: %w", name, err)
		}
	}
	// Established comes before discovery lists the resources, and the
	// manager's REST mapper reads discovery once per group version.
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	gv := kueueapi.SchemeGroupVersion.String()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			return false, nil
		}
		served := map[string]bool{}
		for _, r := range list.APIResources {
			served[r.Name] = true
		}
		for _, name := range names {
			if plural, group, _ := strings.Cut(name, "."); group == kueueapi.SchemeGroupVersion.Group && !served[plural] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for discovery to list %s: %w", gv, err)
	}
	return nil
}

// ModuleDir is where the Go toolchain keeps the Kueue module this binary was
// built with; its CRDs are read from there rather than copied into this
// repository, so they always match the controllers running.
func ModuleDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", Module).Output()
	if err != nil {
		return "", fmt.Errorf("locate %s with go list -m: %w", Module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("locate %s: go list -m printed no directory (module not downloaded?)", Module)
	}
	return dir, nil
}
