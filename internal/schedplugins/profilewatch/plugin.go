package profilewatch

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/schedloop/schedloop/internal/profile"
)

// Name is the plugin's name in KubeSchedulerConfiguration.
const Name = "SchedloopProfile"

// Args say which ConfigMap holds the profile.
type Args struct {
	// Namespace of the profile ConfigMap. Default kube-system.
	Namespace string `json:"namespace,omitempty"`
	// Name of the profile ConfigMap. Default schedloop-profile.
	Name string `json:"name,omitempty"`
}

// SetDefaults fills unset fields.
func (a *Args) SetDefaults() {
	if a.Namespace == "" {
		a.Namespace = "kube-system"
	}
	if a.Name == "" {
		a.Name = profile.DefaultConfigMapName
	}
}

// ValidateArgs names the first invalid field.
func ValidateArgs(a Args) error {
	if errs := validation.IsDNS1123Label(a.Namespace); len(errs) > 0 {
		return fmt.Errorf("%s args: namespace %q: %s", Name, a.Namespace, errs[0])
	}
	if errs := validation.IsDNS1123Subdomain(a.Name); len(errs) > 0 {
		return fmt.Errorf("%s args: name %q: %s", Name, a.Name, errs[0])
	}
	return nil
}

// DecodeArgs decodes, defaults and validates plugin args.
func DecodeArgs(obj runtime.Object) (Args, error) {
	var a Args
	if err := frameworkruntime.DecodeInto(obj, &a); err != nil {
		return a, fmt.Errorf("%s args: %w", Name, err)
	}
	a.SetDefaults()
	return a, ValidateArgs(a)
}

// Plugin pins the active profile into each scheduling cycle at PreFilter,
// so a profile swapped mid-cycle takes effect from the next pod on.
type Plugin struct {
	holder *Holder
}

var _ fwk.PreFilterPlugin = &Plugin{}

// New builds the plugin and starts watching the ConfigMap; the watcher stops
// with ctx (the scheduler's lifetime).
func New(ctx context.Context, obj runtime.Object, h fwk.Handle, holder *Holder) (fwk.Plugin, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	w := &Watcher{Holder: holder, Client: h.ClientSet(), Namespace: args.Namespace, Name: args.Name, Recorder: h.EventRecorder()}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return &Plugin{holder: holder}, nil
}

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

const stateKey fwk.StateKey = Name

type cycleProfile struct{ a *Active }

func (c *cycleProfile) Clone() fwk.StateData { return c }

// PreFilter records the profile this cycle uses.
func (p *Plugin) PreFilter(_ context.Context, state fwk.CycleState, _ *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	state.Write(stateKey, &cycleProfile{a: p.holder.Load()})
	return nil, nil
}

// PreFilterExtensions implements fwk.PreFilterPlugin.
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// ForCycle is the profile pinned for this cycle, or the holder's active one
// when the profile plugin is not enabled.
func ForCycle(state fwk.CycleState, h *Holder) *Active {
	if state != nil {
		if d, err := state.Read(stateKey); err == nil {
			return d.(*cycleProfile).a
		}
	}
	return h.Load()
}
