package events

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/reasons"
)

// clock turns the apiserver's timestamps into the times stored. Kubernetes
// keeps most timestamps to the second; when the watcher saw a transition
// happen within that second, its own reading is the finer one.
type clock struct {
	now func() time.Time
	// mapTime maps wall time onto the stored time axis (identity outside
	// accelerated replays).
	mapTime func(time.Time) time.Time
}

// A whole-second API time t says the transition happened in [t, t+1s). An
// observation inside that second is the better reading. One just past it
// (the transition came late in the second and the watch delivered it a
// little after) bounds the truth from above, so the end of that second is
// the closer reading; without it a transition at t+0.99s would be stored
// almost a second early, which an accelerated replay multiplies.
func (c clock) refine(api, observed time.Time) time.Time {
	if api.IsZero() {
		return c.mapTime(observed)
	}
	if !observed.IsZero() && api.Equal(api.Truncate(time.Second)) && !observed.Before(api) {
		switch d := observed.Sub(api); {
		case d < time.Second:
			return c.mapTime(observed)
		case d < time.Second+maxWatchLag:
			return c.mapTime(api.Add(time.Second - time.Microsecond))
		}
	}
	return c.mapTime(api)
}

// maxWatchLag is how late after a transition the watch is assumed to
// deliver it; a later observation says nothing finer than the API time.
const maxWatchLag = 500 * time.Millisecond

func (c clock) at(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return c.mapTime(t)
}

// podSeen is when the watcher first saw each transition of a pod.
type podSeen struct {
	created, bound, started, ended time.Time
	deleted                        bool
	// condMessage is the failure message last read from the pod's
	// PodScheduled condition (condition.go).
	condMessage string
}

// observe records transitions visible in pod now.
func (s *podSeen) observe(pod *corev1.Pod, now time.Time) {
	if s.created.IsZero() {
		s.created = now
	}
	if s.bound.IsZero() && pod.Spec.NodeName != "" {
		s.bound = now
	}
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if s.started.IsZero() && (pod.Status.Phase == corev1.PodRunning || terminal && pod.Status.StartTime != nil && pod.Spec.NodeName != "") {
		s.started = now
	}
	if s.ended.IsZero() && terminal {
		s.ended = now
	}
}

// toPod converts a pod as last seen.
func (c clock) toPod(pod *corev1.Pod, seen *podSeen, jobUID string) schedloop.Pod {
	// What the scheduler accounts (containers, init containers, overhead;
	// a GPU share as GPUs 1 with its milli-GPU), read as the scheduler reads
	// it. A share no node can honour is recorded without it, as the
	// scheduler's view has it.
	f, _ := podspec.Read(pod)
	p := schedloop.Pod{
		UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, JobUID: jobUID,
		Queue: f.Queue, SchedulerName: pod.Spec.SchedulerName, Priority: f.Priority,
		GPUs: f.Request.GPUs, GPUMilli: f.Request.GPUMilli, CPUMilli: f.Request.CPUMilli, MemoryMiB: f.Request.MemoryMiB,
		GPUModels: f.Request.GPUModels, Node: pod.Spec.NodeName,
		Created: c.refine(pod.CreationTimestamp.Time, seen.created),
		Phase:   schedloop.PhasePending,
	}
	if pod.Spec.NodeName != "" {
		var api time.Time
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionTrue {
				api = cond.LastTransitionTime.Time
			}
		}
		p.Scheduled = c.refine(api, seen.bound)
	}
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if pod.Spec.NodeName != "" && pod.Status.StartTime != nil && (pod.Status.Phase == corev1.PodRunning || terminal) {
		p.Started = c.refine(pod.Status.StartTime.Time, seen.started)
	}
	switch pod.Status.Phase {
	case corev1.PodRunning:
		p.Phase = schedloop.PhaseRunning
	case corev1.PodSucceeded:
		p.Phase = schedloop.PhaseSucceeded
	case corev1.PodFailed:
		p.Phase = schedloop.PhaseFailed
	}
	if terminal {
		var api time.Time
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.FinishedAt.After(api) {
				api = t.FinishedAt.Time
			}
		}
		p.Finished = c.refine(api, seen.ended)
	} else if seen.deleted {
		p.Phase = schedloop.PhaseDeleted
		p.Finished = c.refine(time.Time{}, seen.ended)
		p.Evicted = podspec.Evicted(pod)
	}
	return p
}

// group is a gang as declared by a PodGroup (scheduler-plugins) or by a
// Kubernetes scheduling.k8s.io PodGroup.
type group struct {
	uid, namespace, name, queue string
	minMember                   int
	created                     time.Time // already mapped
	// workloadAPI: a scheduling.k8s.io PodGroup, whose metadata (meta) and
	// its Workload's (workload names it) its pods inherit
	// (podspec.WithGroupMeta).
	workloadAPI bool
	workload    string
	meta        metav1.ObjectMeta // labels and annotations only
	// deleted is when the group object was deleted (mapped), zero while
	// it exists.
	deleted time.Time
}

func (g group) job(gpusPerMember int, priority int32) schedloop.Job {
	return schedloop.Job{UID: g.uid, Namespace: g.namespace, Name: g.name, Kind: schedloop.JobKindGang,
		Queue: g.queue, Priority: priority, MinMember: max(g.minMember, 1), GPUsPerMember: gpusPerMember,
		Created: g.created, Phase: schedloop.PhasePending, Deleted: g.deleted}
}

// groupFromUnstructured reads either PodGroup kind: scheduler-plugins'
// spec.minMember or Kubernetes' spec.schedulingPolicy.gang.minCount.
func (c clock) groupFromUnstructured(u *unstructured.Unstructured, observed time.Time) group {
	g := group{uid: string(u.GetUID()), namespace: u.GetNamespace(), name: u.GetName(),
		queue: u.GetLabels()[podspec.LabelQueue], minMember: 1,
		created: c.refine(u.GetCreationTimestamp().Time, observed)}
	if u.GroupVersionKind().Group == podgroup.Group {
		if n, ok, _ := unstructured.NestedInt64(u.Object, "spec", "minMember"); ok && n > 0 {
			g.minMember = int(n)
		}
		return g
	}
	g.workloadAPI = true
	g.meta = metav1.ObjectMeta{Labels: u.GetLabels(), Annotations: u.GetAnnotations()}
	g.workload, _, _ = unstructured.NestedString(u.Object, "spec", "workloadRef", "workloadName")
	if n, ok, _ := unstructured.NestedInt64(u.Object, "spec", "schedulingPolicy", "gang", "minCount"); ok && n > 0 {
		g.minMember = int(n)
	}
	return g
}

// withWorkload is g with its Workload's metadata applied as its pods'
// (podspec.WithGroupMeta's rule): the group's own queue label wins, else
// its Workload's.
func (g group) withWorkload(w *metav1.ObjectMeta) group {
	if !g.workloadAPI {
		return g
	}
	probe := podspec.WithGroupMeta(&corev1.Pod{}, &g.meta, w)
	g.queue = podspec.Queue(probe)
	return g
}

// loneJob is the job of a pod outside any gang, whose UID and name
// podspec.LoneJob gives.
func loneJob(p schedloop.Pod, uid, name string) schedloop.Job {
	return schedloop.Job{UID: uid, Namespace: p.Namespace, Name: name, Kind: schedloop.JobKindPod,
		Queue: p.Queue, Priority: p.Priority, MinMember: 1, GPUsPerMember: p.GPUs, GPUMilliPerMember: p.GPUMilli,
		CPUMilliPerMember: p.CPUMilli, MemoryMiBPerMember: p.MemoryMiB, GPUModels: p.GPUModels,
		Created: p.Created, Phase: schedloop.PhasePending}
}

// toNode converts a node.
func (c clock) toNode(n *corev1.Node, now time.Time) schedloop.Node {
	out := schedloop.Node{Name: n.Name, Labels: n.Labels, Topology: map[string]string{},
		GPUModel: n.Labels[podspec.LabelGPUProduct], FirstSeen: c.at(n.CreationTimestamp.Time), LastSeen: c.mapTime(now)}
	for k, v := range n.Labels {
		if strings.Contains(k, "topology") {
			out.Topology[k] = v
		}
	}
	if q, ok := n.Status.Allocatable[schedloop.GPUResourceName]; ok {
		out.GPUCount = int(q.Value())
	}
	out.CPUMilli = n.Status.Allocatable.Cpu().MilliValue()
	out.MemoryMiB = n.Status.Allocatable.Memory().Value() >> 20
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			out.Ready = cond.Status == corev1.ConditionTrue
		}
	}
	return out
}

// eventTimes reads an event's count and span from either event API's fields.
func (c clock) eventTimes(e *corev1.Event, observed time.Time) (count int, first, last time.Time) {
	count = int(e.Count)
	first, last = e.FirstTimestamp.Time, e.LastTimestamp.Time
	if first.IsZero() {
		first = e.EventTime.Time
	}
	if e.Series != nil {
		count = max(count, int(e.Series.Count))
		if e.Series.LastObservedTime.After(last) {
			last = e.Series.LastObservedTime.Time
		}
	}
	if first.IsZero() {
		first = e.CreationTimestamp.Time
	}
	if last.IsZero() {
		last = first
	}
	return max(count, 1), c.refine(first, time.Time{}), c.refine(last, observed)
}

// toEvent converts an event.
func (c clock) toEvent(e *corev1.Event, observed time.Time) schedloop.Event {
	count, first, last := c.eventTimes(e, observed)
	source := e.Source.Component
	if source == "" {
		source = e.ReportingController
	}
	return schedloop.Event{UID: string(e.UID), Namespace: e.Namespace, InvolvedKind: e.InvolvedObject.Kind,
		InvolvedName: e.InvolvedObject.Name, InvolvedUID: string(e.InvolvedObject.UID), Reason: e.Reason,
		Type: e.Type, Message: e.Message, Source: source, Count: count, FirstSeen: first, LastSeen: last}
}

// Event reasons that are scheduling attempts.
const (
	reasonFailedScheduling = "FailedScheduling"
	// reasonUnschedulable is KAI's reason for the same event about a pod
	// (Volcano and YuniKorn's shim write FailedScheduling).
	reasonUnschedulable = "Unschedulable"
	reasonScheduled     = "Scheduled"
	reasonPreempted     = "Preempted"
)

// preemption is the eviction a "Preempted" Event on a pod records, when
// its note is schedloop's cause (reasons.Preemption); kube-scheduler's own
// DefaultPreemption names its preemptor by UID only and is left to the
// event and attempt rows.
func preemption(e schedloop.Event) (schedloop.Preemption, bool) {
	if e.Reason != reasonPreempted || e.InvolvedKind != "Pod" || e.InvolvedUID == "" {
		return schedloop.Preemption{}, false
	}
	c, ok := reasons.ParsePreemption(e.Message)
	if !ok {
		return schedloop.Preemption{}, false
	}
	at := e.FirstSeen
	if at.IsZero() {
		at = e.LastSeen
	}
	return schedloop.Preemption{VictimUID: e.InvolvedUID, Namespace: e.Namespace, VictimPod: e.InvolvedName,
		VictimJob: c.Job, Preemptor: c.Preemptor, PreemptorPriority: c.Priority, Node: c.Node, GPUHours: c.GPUHours, At: at}, true
}

// attemptKey identifies the attempt an event's latest count records.
func attemptKey(e schedloop.Event) string { return e.UID + "/" + strconv.Itoa(e.Count) }

// attempts turns a scheduling event about a pod into attempts, keyed by the
// event's UID and count so a re-list or a replayed watch adds nothing: the
// latest occurrence and, for a repeated event, the first. The watcher keeps
// only an event's latest state between writes (and a re-list sees only
// that), so the first occurrence of an event created and then counted up
// in between would otherwise be lost, and the pod's wait before it read as
// not yet attempted. Occurrences between the first and the latest carry no
// time of their own.
func attempts(e schedloop.Event, parser *Parser) []schedloop.SchedulingAttempt {
	latest, ok := attempt(e, parser)
	if !ok {
		return nil
	}
	out := []schedloop.SchedulingAttempt{latest}
	if e.Count > 1 && !e.FirstSeen.IsZero() && e.FirstSeen.Before(e.LastSeen) {
		first := latest
		first.Key, first.At = e.UID+"/1", e.FirstSeen
		out = append(out, first)
	}
	return out
}

// attempt is the attempt an event's latest occurrence records.
func attempt(e schedloop.Event, parser *Parser) (schedloop.SchedulingAttempt, bool) {
	if e.InvolvedKind != "Pod" || e.InvolvedUID == "" {
		return schedloop.SchedulingAttempt{}, false
	}
	a := schedloop.SchedulingAttempt{Key: attemptKey(e), PodUID: e.InvolvedUID, At: e.LastSeen, Message: e.Message}
	switch e.Reason {
	case reasonFailedScheduling, reasonUnschedulable:
		failedAttempt(&a, parser)
	case reasonScheduled:
		a.Result = schedloop.AttemptScheduled
		a.Category = schedloop.WaitOther
	case reasonPreempted:
		a.Result = schedloop.AttemptPreempted
		a.Category = schedloop.WaitPreemption
	default:
		return schedloop.SchedulingAttempt{}, false
	}
	return a, true
}

// failedAttempt fills in a failed attempt from its message, an Event's note
// or a PodScheduled condition's (condition.go).
func failedAttempt(a *schedloop.SchedulingAttempt, parser *Parser) {
	parser.Parse(a.Message).Attempt(a)
	a.Result = schedloop.AttemptUnschedulable
	if a.Category == schedloop.WaitGangIncomplete {
		a.Result = schedloop.AttemptWaiting
	}
}
