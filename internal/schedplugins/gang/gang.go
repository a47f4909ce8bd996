// Package gang is the all-or-nothing plugin for gangs declared either way:
// PodGroups of the scheduler-plugins API (label scheduling.x-k8s.io/pod-group,
// minMember, scheduleTimeoutSeconds) and PodGroups of the Kubernetes
// Workload API (scheduling.k8s.io/v1beta1, pods naming one in
// spec.schedulingGroup.podGroupName; gang.minCount is minMember and, the API
// having no timeout field, the profile's gang timeout applies). Both get one
// gang key (podspec.Gang) and so the same admission, reservation, topology
// plan, queue accounting and order. A pod declaring a gang both ways is
// refused, naming both. It is a thin adapter over core.Manager and
// scoring.GangFit:
//
//   - PreFilter refuses a member while its gang has fewer than minMember
//     pods, while it backs off after a release, and when the gang's
//     outstanding members do not fit beside the gangs already reserving
//     (so two gangs that cannot both fit never both hold GPUs);
//   - Reserve/Permit hold members until minMember are placed;
//   - Unreserve and PostFilter release the whole gang's reservations.
//
// Where the GenericWorkload feature is on, the profile keeps the in-tree
// GangScheduling plugin too. It sees only Workload API gangs and holds them
// back before this plugin does (PreEnqueue until minCount pods exist, and
// all-or-nothing within the scheduler's pod-group cycle); a Workload API
// member is placed only when both admit it. This plugin's timeout, fit
// against other reserving gangs and backoff are the ones that bind, being
// the stricter: the in-tree Permit waits five minutes. The scheduler puts
// a Workload API gang whose pod-group cycle failed back on its backoff
// timer rather than in the unschedulable pool; this plugin's PreEnqueue
// holds it in the pool instead, so it wakes on the events a
// scheduler-plugins gang's pods wake on (see core.Manager.Tried).
package gang

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/reasons"
	"github.com/schedloop/schedloop/internal/schedplugins/gang/core"
	"github.com/schedloop/schedloop/internal/schedplugins/nodeview"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Name is the plugin's name in KubeSchedulerConfiguration.
const Name = "SchedloopGang"

// Args configure the plugin.
type Args struct {
	// TimeoutSeconds is no longer read and must be left unset: how long
	// members wait at Permit is the PodGroup's scheduleTimeoutSeconds, else
	// the active profile's gangTimeoutSeconds (0 meaning
	// scoring.DefaultGangTimeout, 60 s), which the tuner's replays read too.
	// A plugin default the replays cannot see would make a profile mean one
	// thing live and another replayed.
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
	// BackoffSeconds is how long a gang whose reservations were released is
	// refused before trying again. Default 2 (scoring.DefaultGangBackoff,
	// what the simulator replays; change both together).
	BackoffSeconds int `json:"backoffSeconds,omitempty"`
}

// SetDefaults fills unset fields.
func (a *Args) SetDefaults() {
	if a.BackoffSeconds == 0 {
		a.BackoffSeconds = int(scoring.DefaultGangBackoff / time.Second)
	}
}

// ValidateArgs names the first invalid field.
func ValidateArgs(a Args) error {
	if a.TimeoutSeconds != 0 {
		return fmt.Errorf("%s args: timeoutSeconds: %d is no longer read; set gangTimeoutSeconds in the SchedulingProfile instead (0 there means %d s)",
			Name, a.TimeoutSeconds, int(scoring.DefaultGangTimeout/time.Second))
	}
	if a.BackoffSeconds < 0 || a.BackoffSeconds > 600 {
		return fmt.Errorf("%s args: backoffSeconds: %d is outside 0..600", Name, a.BackoffSeconds)
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

// Gang is the plugin.
type Gang struct {
	args    Args
	mgr     *core.Manager
	profile *profilewatch.Holder
	// views keeps each node's scoring view between cycles (see nodeview.Cache).
	views *nodeview.Cache
	// dra reads GPUs asked for through ResourceClaims (nil: none).
	dra *nodeview.DRA
}

var (
	_ fwk.PreFilterPlugin   = &Gang{}
	_ fwk.PostFilterPlugin  = &Gang{}
	_ fwk.ReservePlugin     = &Gang{}
	_ fwk.PermitPlugin      = &Gang{}
	_ fwk.EnqueueExtensions = &Gang{}
	_ fwk.PreEnqueuePlugin  = &Gang{}

	_ fwk.PodGroupPostFilterPlugin = &Gang{}
)

// New builds the plugin over a shared manager (see schedplugins.Set).
func New(obj runtime.Object, mgr *core.Manager, holder *profilewatch.Holder, d *nodeview.DRA) (*Gang, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	return &Gang{args: args, mgr: mgr, profile: holder, views: nodeview.NewCache(nil, d), dra: d}, nil
}

// Name implements fwk.Plugin.
func (g *Gang) Name() string { return Name }

// EventsToRegister says what may make a refused member schedulable: a new
// member, a group object (either API) created or changed, resources freed,
// a node added or changed where the pod may now fit (wakeOnNode).
// The scheduler delivers Workload API PodGroup events only where it serves
// that API. Each event also ends a Workload API gang's gate (see PreEnqueue):
// the hint runs inside the scheduler's own handling of the event, after its
// cache has the change and before the gang's PreEnqueue is asked again.
func (g *Gang) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	pg := fwk.EventResource(fmt.Sprintf("podgroups.%s.%s", podgroup.Version, podgroup.Group))
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Add}, QueueingHintFn: g.wake},
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete}, QueueingHintFn: g.wake},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable | fwk.UpdateNodeTaint | fwk.UpdateNodeLabel},
			QueueingHintFn: g.wakeOnNode},
		{Event: fwk.ClusterEvent{Resource: pg, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: g.wake},
		{Event: fwk.ClusterEvent{Resource: fwk.PodGroup, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: g.wake},
	}, nil
}

// wake is every registered event's hint: the event may let pod's gang
// start, so a Workload API gang's gate ends and the pod is queued.
func (g *Gang) wake(_ klog.Logger, pod *v1.Pod, _, _ any) (fwk.QueueingHint, error) {
	if ref, err := podspec.Gang(pod); err == nil && ref.API == podgroup.APIWorkload {
		g.mgr.Wake(ref.Key)
	}
	return fwk.Queue, nil
}

// wakeOnNode is wake for a node added or changed where the change may let
// pod fit (core.NodeMayAdmit): a Workload API gang held at PreEnqueue wakes
// on a node whose taint it now tolerates, or whose labels now match it, as
// a scheduler-plugins gang's pods refused by TaintToleration or
// NodeAffinity wake on those plugins' hints.
func (g *Gang) wakeOnNode(logger klog.Logger, pod *v1.Pod, old, obj any) (fwk.QueueingHint, error) {
	was, _ := old.(*v1.Node)
	node, ok := obj.(*v1.Node)
	if ok && !core.NodeMayAdmit(pod, was, node) {
		return fwk.QueueSkip, nil
	}
	return g.wake(logger, pod, old, obj)
}

// PreEnqueue holds a Workload API gang that was tried whole and failed in
// the unschedulable pool until one of EventsToRegister's events (or this
// plugin's own release, backoff end or a competing gang's completion)
// wakes it, as a scheduler-plugins gang's pods wait there; see
// core.Manager.Tried for why. Other pods pass.
func (g *Gang) PreEnqueue(_ context.Context, pod *v1.Pod) *fwk.Status {
	ref, err := podspec.Gang(pod)
	if err != nil || ref.API != podgroup.APIWorkload || !g.mgr.Gated(ref.Key) {
		return nil
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("gang %s waits for a cluster change since its last attempt", ref.Key))
}

const stateKey fwk.StateKey = Name

type cycleGang struct {
	key, namespace, name string
	min                  int
	timeout              time.Duration
	req                  scoring.Request
}

func (c *cycleGang) Clone() fwk.StateData { return c }

func readGang(state fwk.CycleState) *cycleGang {
	d, err := state.Read(stateKey)
	if err != nil {
		return nil
	}
	return d.(*cycleGang)
}

// PreFilter admits a gang member, or says plainly why its gang cannot start.
func (g *Gang) PreFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	ref, err := podspec.Gang(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if ref.Key == "" {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	key, name := ref.Key, ref.Name
	pg, err := g.mgr.Group(pod)
	switch {
	case errors.Is(err, core.ErrNotGang):
		return nil, fwk.NewStatus(fwk.Skip)
	case apierrors.IsNotFound(err):
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("pod group %s not found (%s)", key, apiName(ref.API)))
	case err != nil:
		return nil, fwk.AsStatus(err)
	}
	minMember := pg.MinMember
	if ref.API == podgroup.APIWorkload && firstOfCycle(state) {
		g.mgr.Tried(key)
	}
	if why, denied := g.mgr.Denied(key); denied {
		return nil, fwk.NewStatus(fwk.Unschedulable, why)
	}
	c := g.mgr.Count(key)
	if c.All < minMember {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, reasons.GangIncomplete(pod.Namespace, name, c.All, minMember))
	}
	req := podspec.RequestWith(pod, g.dra)
	if outstanding := minMember - c.Placed; outstanding > 0 && !g.mgr.Reserving(key) {
		// GangFit leaves the shared views as they are (it sets reserving
		// gangs aside on copies).
		views, others := g.views.Nodes(nodes), g.mgr.OthersReserving(key)
		if fit := scoring.GangFit(views, others, req, outstanding); fit < outstanding {
			g.mgr.Block(key)
			// Every member exists: the gang waits for capacity, and says
			// which, so that its wait is filed as that shortage.
			short := reasons.ShortCPUMemory
			if scoring.GangShortOfGPUs(views, others, req, outstanding) {
				short = reasons.ShortGPUs
			}
			return nil, fwk.NewStatus(fwk.Unschedulable, reasons.GangNoRoom(pod.Namespace, name, short, fit, outstanding))
		}
	}
	cg := &cycleGang{key: key, namespace: pod.Namespace, name: name, min: minMember, req: req, timeout: g.timeout(state, pg)}
	state.Write(stateKey, cg)
	if state.IsPodGroupSchedulingCycle() {
		if gs := state.GetPodGroupSchedulingCycle(); gs != nil {
			if _, err := gs.Read(stateKey); err != nil {
				gs.Write(stateKey, &groupTrial{gang: cg})
			}
		}
	}
	return nil, nil
}

// triedKey marks a pod-group cycle whose gang was recorded as tried.
const triedKey fwk.StateKey = Name + "/tried"

type triedMark struct{}

func (triedMark) Clone() fwk.StateData { return triedMark{} }

// firstOfCycle reports whether this is the first member's PreFilter of a
// pod-group cycle (or a cycle of one pod), and marks the cycle.
//
// Why: the gang is tried on the snapshot its cycle started from. A freed
// node seen while the cycle runs ends the gate (Wake); were a later
// member's PreFilter to record the gang as tried again, that wake would be
// lost, and the gang, its cycle failed on the older snapshot, would wait
// at PreEnqueue for another event or core.GateLimit.
func firstOfCycle(state fwk.CycleState) bool {
	if !state.IsPodGroupSchedulingCycle() {
		return true
	}
	gs := state.GetPodGroupSchedulingCycle()
	if gs == nil {
		return true
	}
	if _, err := gs.Read(triedKey); err == nil {
		return false
	}
	gs.Write(triedKey, triedMark{})
	return true
}

// groupTrial is what a Workload API gang's pod-group cycle learnt, for
// PodGroupPostFilter: the gang was admitted (PreFilter wrote it) and how
// many of its members were placed at most, its members placed before this
// cycle included, before the cycle failed.
type groupTrial struct {
	gang   *cycleGang
	placed int
}

func (t *groupTrial) Clone() fwk.StateData { return t }

func readTrial(state fwk.PodGroupCycleState) *groupTrial {
	if state == nil {
		return nil
	}
	d, err := state.Read(stateKey)
	if err != nil {
		return nil
	}
	return d.(*groupTrial)
}

// apiName names a gang API in a refusal.
func apiName(a podgroup.API) string {
	if a == podgroup.APIWorkload {
		return "Workload API, " + podgroup.WorkloadGroupVersion
	}
	return "scheduler-plugins, " + podgroup.Group + "/" + podgroup.Version
}

// timeout: the PodGroup's own scheduleTimeoutSeconds, else the active
// profile's gang timeout as scoring.Params defines it (zero is
// scoring.DefaultGangTimeout), the value the simulator replays.
func (g *Gang) timeout(state fwk.CycleState, pg core.Group) time.Duration {
	if s := pg.TimeoutSeconds; s != nil && *s > 0 {
		return time.Duration(*s) * time.Second
	}
	return profilewatch.ForCycle(state, g.profile).Params.EffectiveGangTimeout()
}

// PreFilterExtensions implements fwk.PreFilterPlugin.
func (g *Gang) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// PostFilter releases the gang when a member finds no node while others
// already hold reservations: waiting for the timeout would only keep GPUs
// idle. For a gang's member it also ends the PostFilter phase (the
// profile runs this plugin's PostFilter before SchedloopPreemption's):
// scoring.PreemptsFor lets only lone pods preempt, as the simulator
// replays.
func (g *Gang) PostFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	key, _, ok := podspec.GangKey(pod)
	if !ok {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	why := ""
	// The cycle's gang state is written only when PreFilter admitted the
	// gang (scoring.GangFit): a member of an admitted gang that finds no
	// node releases the members placed before it (scoring.GangBacksOff).
	if cg := readGang(state); cg != nil {
		c := g.mgr.Count(cg.key)
		if scoring.GangBacksOff(true, g.mgr.Reserving(cg.key)) && c.Placed < cg.min {
			why = reasons.GangIncomplete(pod.Namespace, cg.name, c.Placed, cg.min)
			g.mgr.Release(cg.key, Name, why)
		}
	}
	members := 0
	if grp, err := g.mgr.Group(pod); err == nil {
		members = grp.MinMember
	}
	if members == 0 || scoring.PreemptsFor(members) {
		// A PodGroup of one is a lone pod; one that is gone leaves the
		// pod to preemption as before it was grouped. No reason when
		// nothing was released: the framework joins the PostFilter
		// plugins' reasons with ", ", and an empty one would put a stray
		// ", " before the preemption plugin's message.
		if why == "" {
			return nil, fwk.NewStatus(fwk.Unschedulable)
		}
		return nil, fwk.NewStatus(fwk.Unschedulable, why)
	}
	return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, strings.TrimPrefix(why+"; ", "; ")+reasons.GangNoPreempt(key))
}

// PodGroupPostFilter is PostFilter's release for a Workload API gang:
// kube-scheduler runs no PostFilter for the pods of a pod-group cycle, only
// this, once the cycle has failed and taken back the reservations it tried.
// A gang that was admitted and had a member placed (in this cycle, or
// holding a reservation from an earlier one) when another found no node is
// released as a scheduler-plugins gang is (scoring.GangBacksOff): members
// still held at Permit are rejected, the gang backs off, and the reason,
// with the count of members placed before the failure, is added to the
// group's. The in-tree GangScheduling plugin has already kept the cycle
// all-or-nothing (PlacementFeasible); this is what it does not do.
func (g *Gang) PodGroupPostFilter(_ context.Context, state fwk.PodGroupCycleState, _ fwk.PodGroupInfo, _ fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	t := readTrial(state)
	if t == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	cg := t.gang
	placed := max(t.placed, g.mgr.Count(cg.key).Placed)
	if !scoring.GangBacksOff(true, placed > 0 || g.mgr.Reserving(cg.key)) || placed >= cg.min {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	why := reasons.GangIncomplete(cg.namespace, cg.name, placed, cg.min)
	g.mgr.Release(cg.key, Name, why)
	return nil, fwk.NewStatus(fwk.Unschedulable, why)
}

// Reserve records the member's reservation; within a pod-group cycle, as
// a trial (core.Manager.Try).
func (g *Gang) Reserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ string) *fwk.Status {
	cg := readGang(state)
	if cg == nil {
		return nil
	}
	demand := scoring.GangDemand{Request: cg.req, Members: cg.min}
	if !state.IsPodGroupSchedulingCycle() {
		g.mgr.Reserve(pod, cg.key, demand)
		return nil
	}
	g.mgr.Try(pod, cg.key, demand)
	if t := readTrial(state.GetPodGroupSchedulingCycle()); t != nil {
		t.placed = max(t.placed, g.mgr.Count(cg.key).Placed)
	}
	return nil
}

// Unreserve returns the member's reservation and releases the rest of its
// gang. Within a pod-group cycle the scheduler takes back every trial
// reservation, whether the group fits or not, so only the reservation is
// returned there: PodGroupPostFilter releases a gang whose cycle failed.
// A Workload API member whose group fits is reserved and permitted again
// for binding with the cycle's pod-group state set aside
// (IsPodGroupSchedulingCycle is false), so turned away at Reserve or
// Permit there it is released, and its nomination cleared, as a
// scheduler-plugins member is.
func (g *Gang) Unreserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, node string) {
	cg := readGang(state)
	if cg == nil {
		return
	}
	g.mgr.Unreserve(pod, cg.key)
	if state.IsPodGroupSchedulingCycle() {
		return
	}
	// The scheduler may have written this attempt's node as the member's
	// nominated node (core.Manager.Unnominate), whatever the pod object
	// here says.
	if pod.Status.NominatedNodeName != "" || utilfeature.DefaultFeatureGate.Enabled(features.NominatedNodeNameForExpectation) {
		if err := g.mgr.Unnominate(ctx, pod, node); err != nil {
			klog.FromContext(ctx).Error(err, "Clearing the nominated node of a released gang member", "pod", klog.KObj(pod))
		}
	}
	c := g.mgr.Count(cg.key)
	g.mgr.Release(cg.key, Name, reasons.GangIncomplete(pod.Namespace, cg.name, c.Placed, cg.min))
}

// Permit holds the member until minMember of its gang are placed, then lets
// the whole gang bind.
func (g *Gang) Permit(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ string) (*fwk.Status, time.Duration) {
	cg := readGang(state)
	if cg == nil {
		return nil, 0
	}
	c := g.mgr.Count(cg.key)
	if c.Placed >= cg.min {
		g.mgr.AllowWaiting(cg.key, Name)
		return nil, 0
	}
	return fwk.NewStatus(fwk.Wait, reasons.GangIncomplete(pod.Namespace, cg.name, c.Placed, cg.min)), cg.timeout
}
