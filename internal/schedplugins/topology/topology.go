// Package topology is schedloop's Score plugin. It adapts
// scoring.Scorer (fragmentation, packing, spread, topology distance and the
// other terms, weighted by the hot-reloaded profile) to the framework, and
// plans where each gang lands with scoring.PlanGang: the innermost domain of
// the configured levels (ordered node-label keys, outermost first) that can
// hold the gang beside the gangs already reserving. A required level keeps
// a gang's members pending, with a topology reason, rather than spanning it.
//
// The framework picks at random among nodes with equal top scores. This
// plugin folds scoring.Best's tie-break (highest score, then smallest node
// name) into its integer scores, so with the default score plugins disabled
// the live scheduler picks exactly the node the simulator picks.
//
// GPUs are placed per device, as the simulator allocates them: Filter
// checks a GPU pod against each node's devices (scoring.Node.Fit), Reserve
// records the devices the scorer chose on the pod and PreBind writes them
// (podspec.AnnotationGPUDevices), so a GPU share lands on the device the
// simulator would give it and a device holding a share is never handed out
// whole. Both are done only where a share can land: for a share, and for
// whole-GPU pods on a node offering shares (nodeview.OffersShares), whose
// records tell later shares which devices are taken. Elsewhere the
// framework's count of whole GPUs is exact and nothing is written.
package topology

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	corelisters "k8s.io/client-go/listers/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/reasons"
	"github.com/schedloop/schedloop/internal/schedplugins/gang/core"
	"github.com/schedloop/schedloop/internal/schedplugins/nodeview"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/schedplugins/reservation"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Name is the plugin's name in KubeSchedulerConfiguration.
const Name = "SchedloopTopology"

// Args configure the plugin.
type Args struct {
	// Levels are node-label keys from the outermost topology level to the
	// innermost (e.g. spine, rack, NVLink domain); the host is implicit
	// below the last.
	Levels []string `json:"levels,omitempty"`
	// RequiredLevel, when set, is one of Levels (or kubernetes.io/hostname)
	// every gang must stay within; pods may override it with an annotation.
	RequiredLevel string `json:"requiredLevel,omitempty"`
	// WorkloadRefreshSeconds is how often the typical pod mix the
	// fragmentation term measures against is recomputed from the pods the
	// scheduler knows. Default 30.
	WorkloadRefreshSeconds int `json:"workloadRefreshSeconds,omitempty"`
}

// HostLevel names the implicit innermost level.
const HostLevel = "kubernetes.io/hostname"

// DefaultLevels are the labels schedloop's inventories and harness use.
var DefaultLevels = []string{"topology.schedloop.io/spine", "topology.schedloop.io/rack", "topology.schedloop.io/nvlink-domain"}

// SetDefaults fills unset fields.
func (a *Args) SetDefaults() {
	if a.Levels == nil {
		a.Levels = slices.Clone(DefaultLevels)
	}
	if a.WorkloadRefreshSeconds == 0 {
		a.WorkloadRefreshSeconds = 30
	}
}

// ValidateArgs names the first invalid field.
func ValidateArgs(a Args) error {
	seen := sets.New[string]()
	for i, l := range a.Levels {
		if errs := validation.IsQualifiedName(l); len(errs) > 0 {
			return fmt.Errorf("%s args: levels[%d] %q: %s", Name, i, l, errs[0])
		}
		if seen.Has(l) || l == HostLevel {
			return fmt.Errorf("%s args: levels[%d] %q: listed twice (the host level is implicit)", Name, i, l)
		}
		seen.Insert(l)
	}
	if a.RequiredLevel != "" && levelIndex(a.Levels, a.RequiredLevel) < 0 {
		return fmt.Errorf("%s args: requiredLevel %q: not one of levels or %s", Name, a.RequiredLevel, HostLevel)
	}
	if a.WorkloadRefreshSeconds < 1 || a.WorkloadRefreshSeconds > 3600 {
		return fmt.Errorf("%s args: workloadRefreshSeconds: %d is outside 1..3600", Name, a.WorkloadRefreshSeconds)
	}
	return nil
}

// levelIndex maps a level's label key to its index (len(levels) for the
// host), -1 when unknown.
func levelIndex(levels []string, key string) int {
	if key == HostLevel {
		return len(levels)
	}
	return slices.Index(levels, key)
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

// Topology is the plugin.
type Topology struct {
	args    Args
	handle  fwk.Handle
	mgr     *core.Manager
	profile *profilewatch.Holder
	pods    corelisters.PodLister
	now     func() time.Time
	// views keeps each node's scoring view between cycles: a scheduling
	// cycle rebuilds only the nodes whose NodeInfo changed.
	views *nodeview.Cache
	// dra reads GPUs asked for through ResourceClaims (nil: none).
	dra  *nodeview.DRA
	memo *scoreMemo

	workload  atomic.Pointer[workloadSnapshot]
	refreshMu sync.Mutex

	domainsMu sync.Mutex
	domains   map[string]nodeDomains // by node name; see inPlan

	// book is the scheduler's reservation book; nil reserves nothing.
	book *reservation.Book
}

type workloadSnapshot struct {
	w  scoring.Workload
	at time.Time
}

var (
	_ fwk.PreFilterPlugin   = &Topology{}
	_ fwk.PostFilterPlugin  = &Topology{}
	_ fwk.FilterPlugin      = &Topology{}
	_ fwk.PreScorePlugin    = &Topology{}
	_ fwk.ReservePlugin     = &Topology{}
	_ fwk.PermitPlugin      = &Topology{}
	_ fwk.PreBindPlugin     = &Topology{}
	_ fwk.ScorePlugin       = &Topology{}
	_ fwk.EnqueueExtensions = &Topology{}
)

// New builds the plugin over the shared gang manager and reservation book
// (see schedplugins.Set; a nil book reserves nothing).
func New(obj runtime.Object, h fwk.Handle, mgr *core.Manager, holder *profilewatch.Holder, book *reservation.Book, d *nodeview.DRA) (*Topology, error) {
	args, err := DecodeArgs(obj)
	if err != nil {
		return nil, err
	}
	t := &Topology{args: args, handle: h, mgr: mgr, profile: holder, now: time.Now, views: nodeview.NewCache(args.Levels, d), dra: d, memo: newScoreMemo(), book: book}
	if h != nil && h.SharedInformerFactory() != nil {
		t.pods = h.SharedInformerFactory().Core().V1().Pods().Lister()
	}
	return t, nil
}

// Name implements fwk.Plugin.
func (t *Topology) Name() string { return Name }

// EventsToRegister: freed resources or new nodes may open a domain.
func (t *Topology) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete}},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel | fwk.UpdateNodeAllocatable}},
	}, nil
}

// requiredLevel: the pods' own requirement (podspec.TopologyRequired), else
// the Workload API PodGroup's topology constraint (groupKey, which means the
// same), else the plugin's default.
func (t *Topology) requiredLevel(pod *v1.Pod, groupKey string) (int, string) {
	key := t.args.RequiredLevel
	if groupKey != "" {
		key = groupKey
	}
	if v := podspec.TopologyRequired(t.mgr.Effective(pod)); v != "" {
		key = v
	}
	if key == "" {
		return -1, ""
	}
	return levelIndex(t.args.Levels, key), key
}

// PreFilter plans a gang's domain on its first member and narrows the
// candidate nodes to that domain when a level is required or the topology
// term counts (scoring.ConfinedToPlan). Confining is what keeps a gang
// together when the framework filters and scores only a sample of a large
// cluster's nodes (percentageOfNodesToScore), and the simulator confines
// the same way. A gang that finds no node in a domain it was confined to by
// preference alone is unconfined (PostFilter).
func (t *Topology) PreFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	facts, err := podspec.ReadWith(t.mgr.Effective(pod), t.dra)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	// GPUs are placed per device: Filter checks what the framework's
	// per-node counts of whole GPUs and shares cannot (a device holding a
	// share is not free for a whole-GPU pod).
	skip := fwk.NewStatus(fwk.Skip)
	if facts.Request.GPUs > 0 {
		state.Write(gpuKey, &cycleGPU{req: facts.Request})
		skip = nil
	}
	var restricted *reservation.Restriction
	if t.book != nil {
		restricted = t.book.For(pod, func() uint64 { return t.planState(nodes) }, func(head *v1.Pod, now time.Time) ([]string, time.Time, time.Time, bool) {
			return t.planReservation(state, head, now)
		})
		if restricted != nil {
			state.Write(reservedKey, &cycleReserved{r: restricted})
			skip = nil
		}
	}
	key, _, ok := podspec.GangKey(pod)
	if !ok || t.mgr == nil {
		return nil, skip
	}
	group, groupErr := t.mgr.Group(pod)
	level, levelKey := t.requiredLevel(pod, group.TopologyKey)
	if levelKey != "" && level < 0 {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("topology: required level %s is not a configured level", levelKey))
	}
	plan, ok := t.mgr.Plan(key)
	if !ok || !t.mgr.Reserving(key) {
		if groupErr != nil {
			return nil, skip // the gang plugin reports a missing group object
		}
		outstanding := group.MinMember - t.mgr.Count(key).Placed
		if outstanding <= 0 {
			return nil, skip
		}
		view := t.views.Nodes(nodes)
		if restricted != nil {
			// Under a reservation the gang is planned over the nodes open
			// to it, as a replay places it (scoring.BackfillAdmits).
			view = slices.DeleteFunc(slices.Clone(view), func(n *scoring.Node) bool { return !restricted.Admits(n.Name) })
		}
		if others := t.mgr.OthersReserving(key); len(others) > 0 {
			// Cached views are shared: set the other gangs aside on copies.
			view = scoring.CloneNodes(view)
			scoring.Reserve(view, others)
		}
		req := podspec.RequestWith(pod, t.dra)
		p, ok := scoring.PlanGang(view, req, outstanding, len(t.args.Levels), level)
		if !ok {
			if level < 0 {
				return nil, skip // does not fit at all: the gang plugin says so
			}
			gpus := outstanding * max(req.GPUs, 1)
			largest := scoring.LargestDomainGPUs(view, level, len(t.args.Levels))
			return nil, fwk.NewStatus(fwk.Unschedulable, reasons.TopologyUnsatisfied(gpus, levelKey, largest))
		}
		plan = &p
		t.mgr.SetPlan(key, plan)
	}
	weights := profilewatch.ForCycle(state, t.profile).Params.Weights
	if !scoring.ConfinedToPlan(plan, weights, level >= 0) || (level < 0 && t.mgr.Unconfined(key)) {
		return nil, nil
	}
	if level < 0 {
		state.Write(confinedKey, confinedByPreference{})
		if state.IsPodGroupSchedulingCycle() {
			// PodGroupPostFilter unconfines the gang if its cycle fails.
			if gs := state.GetPodGroupSchedulingCycle(); gs != nil {
				gs.Write(confinedKey, confinedGang{key: key})
			}
		}
	}
	return &fwk.PreFilterResult{NodeNames: t.inPlan(plan, nodes)}, nil
}

// inPlan names the nodes inside plan's domain. Every member of a confined
// gang checks every node, so each node's topology path is kept for the node
// object it was read from (the informer replaces the object on any change).
func (t *Topology) inPlan(plan *scoring.GangPlan, nodes []fwk.NodeInfo) sets.Set[string] {
	inside := sets.New[string]()
	t.domainsMu.Lock()
	defer t.domainsMu.Unlock()
	if t.domains == nil {
		t.domains = map[string]nodeDomains{}
	}
	for _, ni := range nodes {
		n := ni.Node()
		if n == nil {
			continue
		}
		d, ok := t.domains[n.Name]
		if !ok || d.node != n {
			d = nodeDomains{node: n, view: &scoring.Node{Name: n.Name, Domains: nodeview.DomainsWith(n, t.args.Levels, t.dra)}}
			t.domains[n.Name] = d
		}
		if plan.Contains(d.view) {
			inside.Insert(n.Name)
		}
	}
	return inside
}

// nodeDomains is a node's topology path as read from one node object.
type nodeDomains struct {
	node *v1.Node
	view *scoring.Node
}

// PreFilterExtensions implements fwk.PreFilterPlugin.
func (t *Topology) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

const (
	confinedKey fwk.StateKey = Name + "/confined"
	gpuKey      fwk.StateKey = Name + "/gpu"
	reservedKey fwk.StateKey = Name + "/reserved"
)

// cycleReserved is the standing reservation's restriction on this cycle's
// pod.
type cycleReserved struct{ r *reservation.Restriction }

func (c *cycleReserved) Clone() fwk.StateData { return c }

// cycleGPU marks a cycle whose pod asks for GPUs.
type cycleGPU struct{ req scoring.Request }

func (c *cycleGPU) Clone() fwk.StateData { return c }

// Filter turns down a node whose devices cannot serve the pod's GPUs
// (scoring.Node.Fit per device, the simulator's test): no device with the
// share free, or too few devices that no share uses. Only GPU pods get here,
// and only a share or a node offering shares is checked per device
// (nodeview.OffersShares).
func (t *Topology) Filter(_ context.Context, state fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) *fwk.Status {
	if d, err := state.Read(reservedKey); err == nil {
		if r := d.(*cycleReserved).r; !r.Admits(ni.Node().Name) {
			t.book.Refused(pod)
			return fwk.NewStatus(fwk.Unschedulable, reasons.Reserved(r.Job))
		}
	}
	d, err := state.Read(gpuKey)
	if err != nil {
		return nil
	}
	req := d.(*cycleGPU).req
	if !req.Shared() && !nodeview.OffersShares(ni) {
		// NodeResourcesFit's count of whole GPUs is exact here, and
		// NodeAffinity enforces the GPU models.
		return nil
	}
	if reason := t.views.Node(ni).Fit(req); reason != scoring.Fits {
		return fwk.NewStatus(fwk.Unschedulable, string(reason))
	}
	return nil
}

// confinedByPreference marks a cycle whose pod PreFilter confined to its
// gang's domain without a required level.
type confinedByPreference struct{}

func (confinedByPreference) Clone() fwk.StateData { return confinedByPreference{} }

// confinedGang marks a pod-group cycle in which PreFilter confined the
// gang key to its domain without a required level.
type confinedGang struct{ key string }

func (c confinedGang) Clone() fwk.StateData { return c }

// PostFilter unconfines a gang whose member fit no node of a domain it was
// confined to only by preference: the plan counted resources, and something
// it does not model (taints, affinity, ports) turned the domain's nodes down,
// so retrying the same domain would never succeed. It never makes the pod
// schedulable itself.
func (t *Topology) PostFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	t.failed(state, pod)
	key, _, ok := podspec.GangKey(pod)
	if !ok || t.mgr == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	if _, err := state.Read(confinedKey); err == nil {
		t.mgr.Unconfine(key)
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

var _ fwk.PodGroupPostFilterPlugin = &Topology{}

// PodGroupPostFilter does for a Workload API gang whose pod-group cycle
// failed what PostFilter does for a scheduler-plugins gang's member:
// kube-scheduler runs no PostFilter for the pods of a pod-group cycle, only
// this, once for the group. It plans the gang's reservation (a member
// stands for its job), and unconfines a gang that PreFilter confined to
// its domain by preference alone. A scheduler-plugins gang's next member
// then tries outside the domain at once; a Workload API gang's members all
// failed in this cycle, so they are retried at once (core.Manager.Retry)
// rather than wait for a cluster event that may never come. It never makes
// the group schedulable.
func (t *Topology) PodGroupPostFilter(_ context.Context, state fwk.PodGroupCycleState, pg fwk.PodGroupInfo, _ fwk.PodGroupSchedulingFunc) (*fwk.PodGroupPostFilterResult, *fwk.Status) {
	if pods := pg.GetUnscheduledPods(); len(pods) > 0 {
		t.failed(nil, pods[0])
	}
	if state != nil && t.mgr != nil {
		if d, err := state.Read(confinedKey); err == nil {
			key := d.(confinedGang).key
			t.mgr.Unconfine(key)
			t.mgr.Retry(key)
		}
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// failed tells the reservation book that pod's job could not be placed.
func (t *Topology) failed(state fwk.CycleState, pod *v1.Pod) {
	if t.book == nil {
		return
	}
	cluster := func() uint64 {
		if t.handle == nil {
			return 0
		}
		nis, err := t.handle.SnapshotSharedLister().NodeInfos().List()
		if err != nil {
			return 0
		}
		return t.planState(nis)
	}
	t.book.Failed(pod, cluster, func(head *v1.Pod, now time.Time) ([]string, time.Time, time.Time, bool) {
		return t.planReservation(state, head, now)
	})
}

const stateKey fwk.StateKey = Name

type cycleScores struct{ byNode map[string]int64 }

func (c *cycleScores) Clone() fwk.StateData { return c }

// PreScore scores every feasible node with scoring.Scorer and folds the
// tie-break in, so Score is a lookup. Scores of nodes unchanged since an
// earlier pod with the same inputs come from the memo.
func (t *Topology) PreScore(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	active, workload, s := t.scorer(state, pod)
	req := podspec.RequestWith(pod, t.dra)
	names := make([]string, len(nodes))
	raw := make([]float64, len(nodes))
	t.memo.scores(nodes, inputsFor(active, workload, s.Plan, req), names, raw, func(ni fwk.NodeInfo) float64 {
		n := t.views.Node(ni)
		if n.Fit(req) != scoring.Fits {
			return 0
		}
		v, _ := s.Score(n, req)
		return v
	})
	state.Write(stateKey, &cycleScores{byNode: FrameworkScores(names, raw)})
	return nil
}

// scorer is the scoring.Scorer for pod in this cycle: the pinned
// profile's weights, the typical workload and the gang's plan.
func (t *Topology) scorer(state fwk.CycleState, pod *v1.Pod) (*profilewatch.Active, *workloadSnapshot, *scoring.Scorer) {
	active := profilewatch.ForCycle(state, t.profile)
	workload := t.typicalWorkload()
	s := &scoring.Scorer{Weights: active.Params.Weights}
	if workload != nil {
		s.Workload = workload.w
	}
	if key, _, ok := podspec.GangKey(pod); ok && t.mgr != nil {
		if p, ok := t.mgr.Plan(key); ok {
			s.Plan = p
		}
	}
	return active, workload, s
}

// FrameworkScores rounds scores to the framework's 0..100 and makes
// scoring.Best's winner the only node with the top integer score.
func FrameworkScores(names []string, raw []float64) map[string]int64 {
	out := make(map[string]int64, len(names))
	for i, name := range names {
		out[name] = int64(math.Round(raw[i]))
	}
	w := scoring.Best(names, raw)
	if w < 0 {
		return out
	}
	top := out[names[w]]
	for i, name := range names {
		if i == w || out[name] < top {
			continue
		}
		if top < fwk.MaxNodeScore {
			top++
			out[names[w]] = top
			break
		}
		out[name] = top - 1
	}
	return out
}

// Reserve records on the pod the devices the scorer chose on its node, as
// the simulator's allocation records them: the devices of a GPU share
// decide what is left on each device. The pod is the scheduler's assumed
// copy, so the node views of the next cycles see the record at once;
// PreBind writes it to the API for the node and the collector.
func (t *Topology) Reserve(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	req := podspec.RequestWith(pod, t.dra)
	if req.GPUs == 0 || t.handle == nil {
		return nil
	}
	ni, err := t.handle.SnapshotSharedLister().NodeInfos().Get(nodeName)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("%s: node %s: %w", Name, nodeName, err))
	}
	if !req.Shared() && !nodeview.OffersShares(ni) {
		// No share can land beside it, so no device record is needed: the
		// view of the node gives its whole-GPU pods the lowest idle
		// devices, as the scorer would have chosen, and the pod is not
		// patched.
		return nil
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	var n *scoring.Node
	if state.IsPodGroupSchedulingCycle() {
		// The pod-group cycle assumed the pod on its snapshot before
		// Reserve, beside the group's members tried before it, with the
		// devices recorded on them here.
		n = nodeview.NodeWithout(ni, t.args.Levels, t.dra, pod.UID)
	} else if d, err := state.Read(devicesKey); err == nil && d.(*cycleDevices).node == nodeName {
		// The pod's group fitted: the scheduler took its trials back and
		// reserves each member again on a snapshot that holds none of the
		// group's members, so the devices chosen in the trial, beside the
		// members tried before it, stand.
		pod.Annotations[podspec.AnnotationGPUDevices] = d.(*cycleDevices).value
		return nil
	} else {
		n = t.views.Node(ni)
	}
	_, _, s := t.scorer(state, pod)
	_, devices := s.Score(n, req)
	if len(devices) != req.GPUs {
		return fwk.NewStatus(fwk.Unschedulable, string(n.Fit(req)))
	}
	pod.Annotations[podspec.AnnotationGPUDevices] = podspec.FormatDevices(devices)
	state.Write(devicesKey, &cycleDevices{node: nodeName, value: pod.Annotations[podspec.AnnotationGPUDevices]})
	return nil
}

// Permit tells the reservation book when a job's last member is placed
// (a lone pod, or the member that completes its gang): the job has started
// and its reservation is spent (reservation.Book.Started). It never holds
// a pod; the gang plugin's Permit does.
func (t *Topology) Permit(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) (*fwk.Status, time.Duration) {
	if t.book == nil {
		return nil, 0
	}
	if key, _, gang := podspec.GangKey(pod); gang {
		if t.mgr == nil {
			return nil, 0
		}
		group, err := t.mgr.Group(pod)
		if err != nil || t.mgr.Count(key).Placed < group.MinMember {
			return nil, 0
		}
	}
	t.book.Started(reservation.JobOf(pod))
	return nil, 0
}

// Unreserve: the assumed pod carrying the record is forgotten.
func (t *Topology) Unreserve(context.Context, fwk.CycleState, *v1.Pod, string) {}

const devicesKey fwk.StateKey = Name + "/devices"

// cycleDevices are the devices Reserve chose for the pod on node.
type cycleDevices struct{ node, value string }

func (c *cycleDevices) Clone() fwk.StateData { return c }

// PreBind writes the devices Reserve chose onto the pod.
func (t *Topology) PreBind(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ string) *fwk.Status {
	d, err := state.Read(devicesKey)
	if err != nil {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		podspec.AnnotationGPUDevices: d.(*cycleDevices).value}}})
	if err != nil {
		return fwk.AsStatus(err)
	}
	_, err = t.handle.ClientSet().CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("%s: record GPU devices on %s/%s: %w", Name, pod.Namespace, pod.Name, err))
	}
	return nil
}

// PreBindPreFlight skips PreBind for pods Reserve recorded nothing for.
func (t *Topology) PreBindPreFlight(_ context.Context, state fwk.CycleState, _ *v1.Pod, _ string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	if _, err := state.Read(devicesKey); err != nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return &fwk.PreBindPreFlightResult{}, nil
}

// Score looks the node's score up.
func (t *Topology) Score(_ context.Context, state fwk.CycleState, _ *v1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	d, err := state.Read(stateKey)
	if err != nil {
		return 0, fwk.AsStatus(fmt.Errorf("%s: no PreScore state: %w", Name, err))
	}
	return d.(*cycleScores).byNode[ni.Node().Name], nil
}

// ScoreExtensions implements fwk.ScorePlugin; scores are already normalised.
func (t *Topology) ScoreExtensions() fwk.ScoreExtensions { return nil }

// typicalWorkload is the GPU pod mix of the pods the scheduler knows,
// recomputed at most every WorkloadRefreshSeconds (nil without a pod lister).
func (t *Topology) typicalWorkload() *workloadSnapshot {
	refresh := time.Duration(t.args.WorkloadRefreshSeconds) * time.Second
	if ws := t.workload.Load(); ws != nil && t.now().Sub(ws.at) < refresh {
		return ws
	}
	if t.pods == nil {
		return nil
	}
	t.refreshMu.Lock()
	defer t.refreshMu.Unlock()
	if ws := t.workload.Load(); ws != nil && t.now().Sub(ws.at) < refresh {
		return ws
	}
	pods, _ := t.pods.List(labels.Everything())
	reqs := make([]scoring.Request, 0, len(pods))
	for _, p := range pods {
		if r := podspec.RequestWith(p, t.dra); r.GPUs > 0 {
			reqs = append(reqs, r)
		}
	}
	ws := &workloadSnapshot{w: scoring.TypicalWorkload(reqs, 0.95), at: t.now()}
	t.workload.Store(ws)
	return ws
}
