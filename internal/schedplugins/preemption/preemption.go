// Package preemption is schedloop's PostFilter plugin: it applies
// internal/scoring's preemption rule live, the rule the simulator replays.
// When a lone pod fits no node, each node is asked which running jobs to
// evict so the pod fits there (scoring.Params.PreemptOnNode) and the node
// whose answer loses least wins (scoring.BetterPreemption): victims are
// whole jobs, a gang with every member on every node; never a job marked
// non-preemptible (podspec.LabelPreemptible "false"), never one younger
// than the profile's preemption.minRunTimeSeconds; the fewest GPU-hours
// lost. Members of a gang do not preempt (scoring.PreemptsFor; SchedloopGang's
// PostFilter, which runs first, ends the phase for them).
//
// The search, the dry run and the eviction are kube-scheduler's preemption
// framework (pkg/scheduler/framework/preemption) with this plugin as its
// Interface, as DefaultPreemption is: victims get the DisruptionTarget
// condition (reason PreemptionByScheduler) and are deleted through the API,
// each with a "Preempted" Event whose related object is the preemptor and
// whose note is the cause (reasons.Preemption: preemptor, priority, node,
// the victim's job and the GPU-hours it lost), and the preemptor is
// nominated to the node. After scoring chose a node's victims, the node is
// checked once more with the framework's filters with them gone, so a rule
// scoring does not model (a taint, a port) can only turn a node down.
//
// It holds no rule of its own and reads pods through internal/podspec.
// PodDisruptionBudgets play no part in the choice.
package preemption

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"
	apipod "k8s.io/kubernetes/pkg/api/v1/pod"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/reasons"
	"github.com/schedloop/schedloop/internal/schedplugins/nodeview"
	"github.com/schedloop/schedloop/internal/schedplugins/profilewatch"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Name is the plugin's name in KubeSchedulerConfiguration. It replaces
// DefaultPreemption at postFilter (a profile must not enable both).
const Name = "SchedloopPreemption"

// Stable status messages.
const (
	msgNoVictims = "no set of preemptible jobs of lower priority makes room on the node"
)

// Plugin applies scoring's preemption rule through the framework's
// preemption evaluator.
type Plugin struct {
	// Effective, when set, is a pod as its labels are read (its Workload
	// API gang's metadata inherited; see podspec.WithGroupMeta).
	Effective func(*v1.Pod) *v1.Pod

	fh     fwk.Handle
	fts    plfeature.Features
	holder *profilewatch.Holder
	// dra reads GPUs asked for through ResourceClaims (nil: none).
	dra       *nodeview.DRA
	now       func() time.Time
	executor  *preemption.Executor
	evaluator *preemption.Evaluator

	// cycle is the view of the PostFilter in progress. The framework runs
	// one scheduling cycle, and so one PostFilter, at a time; the
	// evaluator's callbacks read it from several goroutines.
	mu    sync.Mutex
	cycle *view

	// evicted holds the pods this plugin is evicting or has evicted that a
	// snapshot still listed last time, each with the preemptor and node it
	// was evicted for: the scheduler's cache shows a victim running, with
	// no deletion mark, until its eviction has been issued and seen, and a
	// preemptor retried meanwhile evicted the same pod again (a second
	// Preempted event, and its GPUs counted free twice), or, finding
	// nothing left to evict, gave up the node it was nominated to (see
	// PodEligibleToPreemptOthers). An entry goes once a snapshot no longer
	// lists the pod.
	evictedMu sync.Mutex
	evicted   map[types.UID]eviction
}

// eviction is what a victim was evicted for: the preemptor and the node
// it was nominated to.
type eviction struct {
	preemptor types.UID
	node      string
}

var (
	_ fwk.PostFilterPlugin  = (*Plugin)(nil)
	_ fwk.PreEnqueuePlugin  = (*Plugin)(nil)
	_ fwk.EnqueueExtensions = (*Plugin)(nil)
	_ preemption.Interface  = (*Plugin)(nil)
)

// Name implements fwk.Plugin.
func (p *Plugin) Name() string { return Name }

// New builds the plugin with the scheduler's feature gates; now reads the
// clock the minimum run time and the GPU-hours lost are measured on (nil:
// time.Now).
func New(_ context.Context, _ runtime.Object, h fwk.Handle, holder *profilewatch.Holder, now func() time.Time, d *nodeview.DRA) (*Plugin, error) {
	if now == nil {
		now = time.Now
	}
	p := &Plugin{fh: h, fts: plfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate), holder: holder, now: now, dra: d}
	p.executor = preemption.NewExecutor(h, p.fts)
	p.executor.PreemptPod = p.preemptPod
	p.evaluator = preemption.NewEvaluator(Name, h, p, p.executor)
	return p, nil
}

func (p *Plugin) effective(pod *v1.Pod) *v1.Pod {
	if p.Effective == nil {
		return pod
	}
	return p.Effective(pod)
}

// job is one running job as preemption sees it.
type job struct {
	v    scoring.VictimJob
	pods []fwk.PodInfo
}

// view is the cluster's running jobs at the start of one PostFilter.
type view struct {
	params scoring.Params
	now    int64
	dra    *nodeview.DRA
	jobs   map[string]*job
	byPod  map[types.UID]string
	nodes  map[string]fwk.NodeInfo
	// statuses are the preemptor's Filter results by node, this cycle's.
	statuses fwk.NodeToStatusReader

	mu      sync.Mutex
	choices map[string]scoring.PreemptionChoice
}

// PostFilter implements fwk.PostFilterPlugin.
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, m fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	defer metrics.PreemptionAttempts.Inc()
	v, err := p.snapshot()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	v.statuses = m
	p.mu.Lock()
	p.cycle = v
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.cycle = nil
		p.mu.Unlock()
	}()
	result, status := p.evaluator.Preempt(ctx, state, pod, m)
	if msg := status.Message(); msg != "" {
		return result, fwk.NewStatus(status.Code(), "preemption: "+msg)
	}
	return result, status
}

func (p *Plugin) current() *view {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cycle
}

// snapshot groups the pods on the cluster's nodes into jobs. A gang whose
// members are not all bound (some wait at Permit) is not running yet, and
// is no victim: the simulator offers only running jobs. Nor is a job with
// a pod already on its way out (podspec.Leaving, or being evicted by this
// plugin).
func (p *Plugin) snapshot() (*view, error) {
	nis, err := p.fh.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return nil, fmt.Errorf("%s: list nodes: %w", Name, err)
	}
	now := p.now().UnixNano()
	v := &view{params: p.holder.Load().Params, now: now, dra: p.dra, jobs: map[string]*job{}, byPod: map[types.UID]string{},
		nodes: map[string]fwk.NodeInfo{}, choices: map[string]scoring.PreemptionChoice{}}
	waiting := map[string]bool{}
	p.evictedMu.Lock()
	defer p.evictedMu.Unlock()
	listed := map[types.UID]bool{}
	for _, ni := range nis {
		if ni.Node() == nil {
			continue
		}
		v.nodes[ni.Node().Name] = ni
		for _, pi := range ni.GetPods() {
			pod := pi.GetPod()
			key := jobKey(pod)
			_, evicting := p.evicted[pod.UID]
			if evicting {
				listed[pod.UID] = true
			}
			if p.fh.GetWaitingPod(pod.UID) != nil || podspec.Leaving(pod) || evicting {
				waiting[key] = true
			}
			started := Started(pod, now)
			prio := corev1helpers.PodPriority(pod)
			j := v.jobs[key]
			if j == nil {
				j = &job{v: scoring.VictimJob{Name: key, Priority: prio, Started: started}}
				v.jobs[key] = j
			}
			j.v.Priority = max(j.v.Priority, prio)
			j.v.Started = min(j.v.Started, started)
			j.v.NonPreemptible = j.v.NonPreemptible || podspec.NonPreemptible(p.effective(pod))
			j.v.GPUMilli += podspec.RequestWith(pod, v.dra).CountedMilli()
			j.pods = append(j.pods, pi)
			v.byPod[pod.UID] = key
		}
	}
	for uid := range p.evicted {
		if !listed[uid] {
			delete(p.evicted, uid)
		}
	}
	for key := range waiting {
		for _, pi := range v.jobs[key].pods {
			delete(v.byPod, pi.GetPod().UID)
		}
		delete(v.jobs, key)
	}
	return v, nil
}

// Started is when pod started running, in Unix nanoseconds: its status's
// start time, else now (a pod bound but not yet started has run for
// nothing), and never after now (a clock behind the kubelet's).
func Started(pod *v1.Pod, now int64) int64 {
	if t := pod.Status.StartTime; t != nil {
		return min(t.UnixNano(), now)
	}
	return now
}

// preemptPod evicts one victim as the framework's executor does (a pod
// waiting at Permit or in PreBind is turned back in memory; any other gets
// the DisruptionTarget condition and is deleted through the API), and
// records the cause, reasons.Preemption, as the "Preempted" Event's note
// with the preemptor pod as its related object, and as the condition's
// message. The victim's job and what it lost are read from the candidate's
// victims, which hold every pod of each job evicted.
func (p *Plugin) preemptPod(ctx context.Context, c preemption.Candidate, preemptor preemption.ExecutorPreemptor, victim *v1.Pod, pluginName string) (bool, error) {
	logger := klog.FromContext(ctx)
	cause := p.cause(c, preemptor, victim)
	inMemory := false
	if wp := p.fh.GetWaitingPod(victim.UID); wp != nil {
		inMemory = wp.Preempt(pluginName, "preempted")
	} else if pb := p.fh.GetPodInPreBind(victim.UID); pb != nil {
		inMemory = pb.CancelPod("preempted by " + pluginName)
	}
	if !inMemory {
		// Marked before the API calls: the framework's asynchronous executor
		// lets the preemptor back once the pod lister shows the last
		// victim's deletion, which the next cycle's snapshot may not show
		// yet, and that cycle must not pick the victim again.
		p.markEvicted(victim.UID, &eviction{preemptor: preemptor.UID(), node: c.Name()})
		condition := &v1.PodCondition{
			Type:               v1.DisruptionTarget,
			ObservedGeneration: apipod.CalculatePodConditionObservedGeneration(&victim.Status, victim.Generation, v1.DisruptionTarget),
			Status:             v1.ConditionTrue,
			Reason:             v1.PodReasonPreemptionByScheduler,
			Message:            preemptor.SchedulerName() + ": " + cause.String(),
		}
		status := victim.Status.DeepCopy()
		if apipod.UpdatePodCondition(status, condition) {
			if err := schedutil.PatchPodStatus(ctx, p.fh.ClientSet(), victim.Name, victim.Namespace, &victim.Status, status); err != nil {
				if apierrors.IsNotFound(err) {
					return false, nil
				}
				p.markEvicted(victim.UID, nil)
				return false, fmt.Errorf("%s: mark %s/%s preempted: %w", Name, victim.Namespace, victim.Name, err)
			}
		}
		if err := schedutil.DeletePod(ctx, p.fh.ClientSet(), victim); err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			p.markEvicted(victim.UID, nil)
			return false, fmt.Errorf("%s: delete %s/%s: %w", Name, victim.Namespace, victim.Name, err)
		}
	}
	logger.V(2).Info("Preempted", "victim", klog.KObj(victim), "preemptor", klog.KObj(preemptor), "node", c.Name(), "job", cause.Job, "gpuHours", cause.GPUHours)
	var related runtime.Object
	for _, pod := range preemptor.Pods() {
		related = pod
	}
	p.fh.EventRecorder().Eventf(victim, related, v1.EventTypeNormal, "Preempted", "Preempting", "%s", cause.String())
	return inMemory, nil
}

// markEvicted records that the plugin is evicting pod for e, or, e nil,
// that its eviction failed and the pod stays a candidate.
func (p *Plugin) markEvicted(pod types.UID, e *eviction) {
	p.evictedMu.Lock()
	defer p.evictedMu.Unlock()
	if e == nil {
		delete(p.evicted, pod)
		return
	}
	if p.evicted == nil {
		p.evicted = map[types.UID]eviction{}
	}
	p.evicted[pod] = *e
}

// victimsLeaving names a node preemptor was nominated to where a pod it
// evicted is still listed, "" for none.
func (p *Plugin) victimsLeaving(preemptor types.UID) string {
	p.evictedMu.Lock()
	defer p.evictedMu.Unlock()
	for _, e := range p.evicted {
		if e.preemptor == preemptor {
			return e.node
		}
	}
	return ""
}

// cause is why victim goes: its job and the GPU-hours the whole job loses,
// from the candidate's victims (every pod of each job evicted).
func (p *Plugin) cause(c preemption.Candidate, preemptor preemption.ExecutorPreemptor, victim *v1.Pod) reasons.Preemption {
	key := jobKey(victim)
	now := p.now().UnixNano()
	j := scoring.VictimJob{Name: key, Started: Started(victim, now)}
	for _, pod := range c.Victims().Pods {
		if jobKey(pod) == key {
			j.GPUMilli += podspec.RequestWith(pod, p.dra).CountedMilli()
			j.Started = min(j.Started, Started(pod, now))
		}
	}
	return reasons.Preemption{Preemptor: preemptor.GetNamespace() + "/" + preemptor.GetName(), Priority: preemptor.Priority(),
		Node: c.Name(), Job: key, GPUHours: float64(j.Lost(now)) / scoring.MilliPerGPU / 3600}
}

// jobKey names pod's job: its gang's namespace/name, or its own.
func jobKey(pod *v1.Pod) string {
	if key, _, gang := podspec.GangKey(pod); gang {
		return key
	}
	return pod.Namespace + "/" + pod.Name
}

// SelectVictimsOnNode implements preemption.Interface: scoring's choice of
// jobs on the node, every pod of them (on any node) returned as a victim.
func (p *Plugin) SelectVictimsOnNode(ctx context.Context, state fwk.CycleState, preemptor *v1.Pod, nodeInfo fwk.NodeInfo,
	_ []*preemption.DomainVictim, _ []*policy.PodDisruptionBudget) ([]*v1.Pod, int, *fwk.Status) {
	v := p.current()
	if v == nil {
		return nil, 0, fwk.AsStatus(fmt.Errorf("%s: no preemption in progress", Name))
	}
	node, held := nodeview.NodeHeld(nodeInfo, nil, v.dra)
	var keys []string
	var jobs []scoring.VictimJob
	var here [][]scoring.Allocation
	for _, h := range held {
		key, ok := v.byPod[h.Pod.UID]
		if !ok {
			continue
		}
		k := slices.Index(keys, key)
		if k < 0 {
			k = len(keys)
			keys = append(keys, key)
			jobs = append(jobs, v.jobs[key].v)
			here = append(here, nil)
		}
		here[k] = append(here[k], h.Alloc)
	}
	c, ok := v.params.PreemptOnNode(node, podspec.RequestWith(preemptor, v.dra), corev1helpers.PodPriority(preemptor), v.now, jobs, here)
	if !ok {
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, msgNoVictims)
	}
	var victims []*v1.Pod
	name := nodeInfo.Node().Name
	for _, k := range c.Victims {
		for _, pi := range v.jobs[keys[k]].pods {
			pod := pi.GetPod()
			on := nodeInfo
			if pod.Spec.NodeName != name {
				on = v.nodes[pod.Spec.NodeName]
			} else if err := nodeInfo.RemovePod(klog.FromContext(ctx), pod); err != nil {
				return nil, 0, fwk.AsStatus(err)
			}
			if on != nil {
				if s := p.fh.RunPreFilterExtensionRemovePod(ctx, state, preemptor, pi, on); !s.IsSuccess() {
					return nil, 0, s
				}
			}
			victims = append(victims, pod)
		}
	}
	if s := p.fh.RunFilterPluginsWithNominatedPods(ctx, state, preemptor, nodeInfo); !s.IsSuccess() {
		return nil, 0, s
	}
	v.mu.Lock()
	v.choices[name] = c
	v.mu.Unlock()
	return victims, 0, nil
}

// OrderedScoreFuncs implements preemption.Interface: one score, the rank
// of each node's choice under scoring.BetterPreemption.
func (p *Plugin) OrderedScoreFuncs(_ context.Context, nodesToVictims map[string]*extenderv1.Victims) []func(node string) int64 {
	v := p.current()
	if v == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	names := make([]string, 0, len(nodesToVictims))
	for n := range nodesToVictims {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		ca, cb := v.choices[a], v.choices[b]
		switch {
		case scoring.BetterPreemption(ca, cb):
			return -1
		case scoring.BetterPreemption(cb, ca):
			return 1
		}
		return 0
	})
	rank := make(map[string]int64, len(names))
	for i, n := range names {
		rank[n] = -int64(i)
	}
	return []func(string) int64{func(n string) int64 { return rank[n] }}
}

// GetOffsetAndNumCandidates implements preemption.Interface: every node,
// from the first, so the choice is the best of all nodes, as replayed.
func (p *Plugin) GetOffsetAndNumCandidates(nodes int32) (int32, int32) { return 0, nodes }

// CandidatesToVictimsMap implements preemption.Interface.
func (p *Plugin) CandidatesToVictimsMap(candidates []preemption.Candidate) map[string]*extenderv1.Victims {
	m := make(map[string]*extenderv1.Victims, len(candidates))
	for _, c := range candidates {
		m[c.Name()] = c.Victims()
	}
	return m
}

// PodEligibleToPreemptOthers implements preemption.Interface: not a pod
// whose PriorityClass says preemptionPolicy Never, and not a pod nominated
// to a node where its earlier victims are still terminating
// (DefaultPreemption's rule: it waits for them), unless its filters now
// turn that node down for good. A pod's victims are still terminating
// while the cache shows a pod this plugin evicted for it, too.
//
// Why: the preemptor can be tried again while its cycle's snapshot still
// shows a victim running with no deletion mark (the executor lets it back
// once the pod lister, not the snapshot, shows the last victim's
// deletion; under load it was seen back sooner), which DefaultPreemption's
// test misses, and while the pod object it is handed does not yet name
// its nominated node. Its victims being no candidates again (snapshot),
// such a cycle found nothing to evict, and a preemption that finds nothing
// clears the pod's nomination: the node its victims free was then not
// held for it against pods of lower priority (the framework's Filter
// counts a node's nominated pods of higher priority as placed there), and
// the evicted gang's new members took it first, to be evicted in turn.
//
// A gang's member never gets here: SchedloopGang's PostFilter, which runs
// first, ends the phase for it (scoring.PreemptsFor), and leaves a
// PodGroup of one to preempt as the lone pod it is.
func (p *Plugin) PodEligibleToPreemptOthers(_ context.Context, pod *v1.Pod, nominatedNodeStatus *fwk.Status) (bool, string) {
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == v1.PreemptNever {
		return false, "not eligible due to preemptionPolicy=Never."
	}
	if node := p.victimsLeaving(pod.UID); node != "" && p.statusOn(node).Code() != fwk.UnschedulableAndUnresolvable {
		return false, "not eligible due to the pods it preempted on node " + node + " still terminating."
	}
	if nom := pod.Status.NominatedNodeName; nom != "" && nominatedNodeStatus.Code() != fwk.UnschedulableAndUnresolvable {
		if ni, _ := p.fh.SnapshotSharedLister().NodeInfos().Get(nom); ni != nil {
			prio := corev1helpers.PodPriority(pod)
			for _, pi := range ni.GetPods() {
				if corev1helpers.PodPriority(pi.GetPod()) < prio && preemption.PodTerminatingByPreemption(pi.GetPod()) {
					return false, "not eligible due to a terminating pod on the nominated node."
				}
			}
		}
	}
	return true, ""
}

// statusOn is this cycle's Filter status of the preemptor on node (nil,
// success, outside a PostFilter).
func (p *Plugin) statusOn(node string) *fwk.Status {
	if v := p.current(); v != nil && v.statuses != nil {
		return v.statuses.Get(node)
	}
	return nil
}

// PreEnqueue implements fwk.PreEnqueuePlugin: with asynchronous preemption
// a preemptor waits until its victims' deletions have been issued.
func (p *Plugin) PreEnqueue(_ context.Context, pod *v1.Pod) *fwk.Status {
	if p.fts.EnableAsyncPreemption && p.executor.IsPodRunningPreemption(pod.GetUID()) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "waiting for the preemption for this pod to be finished")
	}
	return nil
}

// EventsToRegister implements fwk.EnqueueExtensions, as DefaultPreemption
// does: nothing but what asynchronous preemption needs.
func (p *Plugin) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	if !p.fts.EnableAsyncPreemption {
		return nil, nil
	}
	return []fwk.ClusterEventWithHint{{
		Event:          fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete},
		QueueingHintFn: func(klog.Logger, *v1.Pod, any, any) (fwk.QueueingHint, error) { return fwk.QueueSkip, nil },
	}}, nil
}
