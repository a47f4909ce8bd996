// Package why answers "why did this pod (or job) wait?": it assembles, from
// the store, a timeline from creation to finish whose waiting intervals carry
// a human label (gang incomplete 3/8, insufficient GPU on 56/64 nodes, ...),
// the scheduling attempts behind them and the GPU activity while it ran. The
// JSON API and the `collector why` command both print this one story.
//
// It reads through the store only and knows nothing about HTTP.
package why

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/reasons"
	"github.com/schedloop/schedloop/internal/store"
)

// Interval is one stretch of the timeline.
type Interval struct {
	Start    time.Time      `json:"start"`
	End      time.Time      `json:"end"`
	Seconds  float64        `json:"seconds"`
	State    string         `json:"state"` // "waiting" or "running"
	Category string         `json:"category,omitempty"`
	Label    string         `json:"label"`
	Reasons  map[string]int `json:"reasons,omitempty"`
	Nodes    int            `json:"total_nodes,omitempty"`
	Message  string         `json:"message,omitempty"`
}

// Reason is the time spent waiting for one reason category.
type Reason struct {
	Category string  `json:"category"`
	Title    string  `json:"title"`
	Seconds  float64 `json:"seconds"`
	Share    float64 `json:"share"`
}

// Attempt is one scheduling decision reported for a pod.
type Attempt struct {
	At       time.Time      `json:"at"`
	Pod      string         `json:"pod"`
	Result   string         `json:"result"`
	Category string         `json:"category"`
	Nodes    int            `json:"total_nodes"`
	Reasons  map[string]int `json:"reasons,omitempty"`
	Message  string         `json:"message,omitempty"`
}

// Activity is the GPU activity of the workload in one bucket.
type Activity struct {
	Time        time.Time `json:"t"`
	GPUs        int       `json:"gpus"`
	Active      float64   `json:"active"`
	IdleMinutes int       `json:"idle_gpu_minutes"`
}

// Member is one pod of a job.
type Member struct {
	UID         string     `json:"uid"`
	Name        string     `json:"name"`
	Node        string     `json:"node,omitempty"`
	Phase       string     `json:"phase"`
	Created     time.Time  `json:"created"`
	Scheduled   *time.Time `json:"scheduled,omitempty"`
	WaitSeconds float64    `json:"wait_seconds"`
}

// Story is the whole answer for one pod or job.
type Story struct {
	Kind      string     `json:"kind"` // "pod" or "job"
	UID       string     `json:"uid"`
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	Queue     string     `json:"queue,omitempty"`
	Phase     string     `json:"phase"`
	GPUs      int        `json:"gpus"`
	Node      string     `json:"node,omitempty"`
	Job       string     `json:"job,omitempty"` // a pod's job UID
	Created   time.Time  `json:"created"`
	Scheduled *time.Time `json:"scheduled,omitempty"`
	Finished  *time.Time `json:"finished,omitempty"`
	// Gate is, for a job, the member whose wait decided when the gang could
	// start (the last one bound); its intervals are the job's.
	Gate        string     `json:"gate_pod,omitempty"`
	WaitSeconds float64    `json:"wait_seconds"`
	RunSeconds  float64    `json:"run_seconds"`
	Breakdown   []Reason   `json:"breakdown"`
	Timeline    []Interval `json:"timeline"`
	Attempts    []Attempt  `json:"attempts"`
	Activity    []Activity `json:"activity"`
	Members     []Member   `json:"members,omitempty"`
	// Preemptions are the evictions of this pod or job (each took the
	// victim's whole job) and those made to start it, in time order.
	Preemptions []Preemption `json:"preemptions"`
}

// Preemption is one eviction by schedloop's preemption and its cause.
type Preemption struct {
	At time.Time `json:"at"`
	// Role is "victim" when this pod or job was evicted, "preemptor" when
	// the eviction made room for it.
	Role string `json:"role"`
	// Pod is the evicted pod, Job its job (namespace/name), evicted whole.
	Pod       string  `json:"pod"`
	Job       string  `json:"job"`
	Preemptor string  `json:"preemptor"`
	Priority  int32   `json:"preemptor_priority"`
	Node      string  `json:"node"`
	GPUHours  float64 `json:"gpu_hours_lost"`
}

// ErrNotFound is returned when no pod or job matches.
var ErrNotFound = errors.New("no pod or job matches")

// maxActivityPoints bounds the activity chart however long the run was.
const maxActivityPoints = 240

// Builder assembles stories from a store.
type Builder struct {
	Store *store.Store
	// Threshold is the engine activity below which a held GPU is idle.
	Threshold float64
	// Now ends the intervals of pods still waiting or running.
	Now func() time.Time
}

// Resolve finds the pod or job a person typed: a UID, "namespace/name" or a
// name. An exact match wins over prefix matches; jobs win over pods of the
// same name. ErrNotFound when nothing matches; an error listing the
// candidates when the name is ambiguous.
func (b Builder) Resolve(ctx context.Context, query, kind string) (store.Match, error) {
	matches, err := b.Store.FindWorkloads(ctx, query, "", 50)
	if err != nil {
		return store.Match{}, err
	}
	var exact []store.Match
	for _, m := range matches {
		if kind != "" && m.Kind != kind {
			continue
		}
		if m.UID == query || m.Namespace+"/"+m.Name == query || m.Name == query {
			exact = append(exact, m)
		}
	}
	switch {
	case len(exact) == 1:
		return exact[0], nil
	case len(exact) > 1:
		if exact[0].Kind != exact[1].Kind || exact[0].UID == query {
			return exact[0], nil
		}
		return store.Match{}, fmt.Errorf("%q is ambiguous: %s", query, describeMatches(exact))
	}
	if len(matches) == 0 {
		return store.Match{}, fmt.Errorf("%q: %w", query, ErrNotFound)
	}
	return store.Match{}, fmt.Errorf("%q: %w exactly; did you mean %s", query, ErrNotFound, describeMatches(matches))
}

func describeMatches(ms []store.Match) string {
	var parts []string
	for i, m := range ms {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(ms)-5))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s/%s (uid %s)", m.Kind, m.Namespace, m.Name, m.UID))
	}
	return strings.Join(parts, ", ")
}

// Pod builds the story of one pod.
func (b Builder) Pod(ctx context.Context, uid string) (Story, error) {
	p, err := b.Store.GetPod(ctx, uid)
	if errors.Is(err, store.ErrNotFound) {
		return Story{}, fmt.Errorf("pod uid %q: %w", uid, ErrNotFound)
	}
	if err != nil {
		return Story{}, err
	}
	st := Story{Kind: "pod", UID: p.UID, Namespace: p.Namespace, Name: p.Name, Queue: p.Queue, Phase: string(p.Phase),
		GPUs: p.GPUs, Node: p.Node, Job: p.JobUID, Created: p.Created, Scheduled: ptr(p.Scheduled), Finished: ptr(p.Finished)}
	if err := b.fill(ctx, &st, p, []schedloop.Pod{p}); err != nil {
		return Story{}, err
	}
	return st, nil
}

// Job builds the story of a job: the timeline of the member that gated it,
// every member's wait, and the GPU activity of all members.
func (b Builder) Job(ctx context.Context, uid string) (Story, error) {
	j, err := b.Store.GetJob(ctx, uid)
	if errors.Is(err, store.ErrNotFound) {
		return Story{}, fmt.Errorf("job uid %q: %w", uid, ErrNotFound)
	}
	if err != nil {
		return Story{}, err
	}
	pods, err := b.Store.PodsOfJob(ctx, uid)
	if err != nil {
		return Story{}, err
	}
	st := Story{Kind: "job", UID: j.UID, Namespace: j.Namespace, Name: j.Name, Queue: j.Queue, Phase: string(j.Phase),
		GPUs: j.GPUsPerMember * j.MinMember, Created: j.Created, Scheduled: ptr(firstNonZero(j.Admitted, j.FirstScheduled)),
		Finished: ptr(j.Finished)}
	if len(pods) == 0 {
		st.Breakdown, st.Timeline, st.Attempts, st.Activity, st.Preemptions = []Reason{}, []Interval{}, []Attempt{}, []Activity{}, []Preemption{}
		return st, nil
	}
	gate := gatingPod(pods)
	st.Gate = gate.Name
	for _, p := range pods {
		ivs, err := b.Store.PodWaitIntervals(ctx, p.UID)
		if err != nil {
			return Story{}, err
		}
		var wait float64
		for _, iv := range ivs {
			wait += iv.End.Sub(iv.Start).Seconds()
		}
		st.Members = append(st.Members, Member{UID: p.UID, Name: p.Name, Node: p.Node, Phase: string(p.Phase),
			Created: p.Created, Scheduled: ptr(p.Scheduled), WaitSeconds: wait})
	}
	if err := b.fill(ctx, &st, gate, pods); err != nil {
		return Story{}, err
	}
	// The job's own times bound the running stretch when they are known.
	return st, nil
}

// gatingPod is the member bound last, or, while some are unbound, the
// oldest unbound one: the gang could not start before it.
func gatingPod(pods []schedloop.Pod) schedloop.Pod {
	var gate schedloop.Pod
	for _, p := range pods {
		switch {
		case gate.UID == "":
			gate = p
		case p.Scheduled.IsZero() != gate.Scheduled.IsZero():
			if p.Scheduled.IsZero() {
				gate = p
			}
		case p.Scheduled.IsZero():
			if p.Created.Before(gate.Created) {
				gate = p
			}
		case p.Scheduled.After(gate.Scheduled):
			gate = p
		}
	}
	return gate
}

func (b Builder) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// fill adds the timeline of pod p, the attempts of all pods and their GPU activity.
func (b Builder) fill(ctx context.Context, st *Story, p schedloop.Pod, pods []schedloop.Pod) error {
	ivs, err := b.Store.PodWaitIntervals(ctx, p.UID)
	if err != nil {
		return err
	}
	byCat := map[string]float64{}
	st.Timeline = []Interval{}
	var waits []Interval
	for _, iv := range ivs {
		waits = append(waits, Interval{Start: iv.Start, End: iv.End, Seconds: iv.End.Sub(iv.Start).Seconds(), State: "waiting",
			Category: iv.Category, Label: Label(iv.Category, iv.Reasons, iv.TotalNodes, iv.Message),
			Reasons: iv.Reasons, Nodes: iv.TotalNodes, Message: iv.Message})
	}
	// A job behind Kueue first waits for quota, its pods held by the
	// admission gate; that wait is the Workload's, not the scheduler's.
	if st.Kind == "job" {
		quota, err := b.quotaWaits(ctx, st.Namespace, st.Name)
		if err != nil {
			return err
		}
		waits = append(ClipToQuota(waits, quota), quota...)
		sort.SliceStable(waits, func(i, j int) bool { return waits[i].Start.Before(waits[j].Start) })
	}
	for _, iv := range waits {
		st.WaitSeconds += iv.Seconds
		byCat[iv.Category] += iv.Seconds
		st.Timeline = append(st.Timeline, iv)
	}
	st.Breakdown = []Reason{}
	for _, c := range slices.Sorted(maps.Keys(byCat)) {
		share := 0.0
		if st.WaitSeconds > 0 {
			share = byCat[c] / st.WaitSeconds
		}
		st.Breakdown = append(st.Breakdown, Reason{Category: c, Title: Title(c), Seconds: byCat[c], Share: share})
	}
	sort.SliceStable(st.Breakdown, func(i, j int) bool { return st.Breakdown[i].Seconds > st.Breakdown[j].Seconds })

	runFrom, runTo := firstNonZero(p.Started, p.Scheduled), p.Finished
	if !runFrom.IsZero() {
		ended := runTo
		if ended.IsZero() {
			ended = b.now()
		}
		st.RunSeconds = max(ended.Sub(runFrom).Seconds(), 0)
		label := "running"
		if p.Node != "" {
			label = "running on " + p.Node
		}
		if runTo.IsZero() {
			label += " (still running)"
		}
		st.Timeline = append(st.Timeline, Interval{Start: runFrom, End: ended, Seconds: st.RunSeconds, State: "running", Label: label})
	}

	st.Attempts = []Attempt{}
	for _, q := range pods {
		as, err := b.Store.PodAttempts(ctx, q.UID)
		if err != nil {
			return err
		}
		for _, a := range as {
			st.Attempts = append(st.Attempts, Attempt{At: a.At, Pod: q.Name, Result: string(a.Result),
				Category: string(a.Category), Nodes: a.TotalNodes, Reasons: a.Reasons, Message: a.Message})
		}
	}
	sort.SliceStable(st.Attempts, func(i, j int) bool { return st.Attempts[i].At.Before(st.Attempts[j].At) })

	if err := b.preemptions(ctx, st, pods); err != nil {
		return err
	}

	st.Activity = []Activity{}
	if runFrom.IsZero() {
		return nil
	}
	from, to := runFrom.Truncate(time.Minute), runTo
	if to.IsZero() {
		to = b.now()
	}
	names := make([]string, len(pods))
	for i, q := range pods {
		names[i] = q.Name
	}
	step := max(to.Sub(from)/maxActivityPoints, time.Minute)
	points, err := b.Store.PodGPUActivity(ctx, p.Namespace, names, from, to, step, b.Threshold)
	if err != nil {
		return err
	}
	for _, pt := range points {
		st.Activity = append(st.Activity, Activity{Time: pt.Time, GPUs: pt.GPUs, Active: pt.Active, IdleMinutes: pt.IdleMinutes})
	}
	return nil
}

// quotaWaits are the quota waits of the Kueue Workload named as the job,
// none when Kueue does not manage it.
func (b Builder) quotaWaits(ctx context.Context, namespace, name string) ([]Interval, error) {
	wls, err := b.Store.KueueWorkloads(ctx, namespace)
	if err != nil {
		return nil, err
	}
	for _, wl := range wls {
		if wl.Name != name {
			continue
		}
		cqs, err := b.Store.KueueClusterQueues(ctx)
		if err != nil {
			return nil, err
		}
		var cq *schedloop.KueueClusterQueue
		for i := range cqs {
			if cqs[i].Name == wl.ClusterQueue {
				cq = &cqs[i]
			}
		}
		return QuotaIntervals(wl, cq, b.now()), nil
	}
	return nil, nil
}

// preemptions adds the evictions of pods (or of the job st tells) and
// those made for them.
func (b Builder) preemptions(ctx context.Context, st *Story, pods []schedloop.Pod) error {
	var uids, jobs, names []string
	for _, q := range pods {
		uids = append(uids, q.UID)
		names = append(names, q.Namespace+"/"+q.Name)
	}
	if st.Kind == "job" {
		jobs = append(jobs, st.Namespace+"/"+st.Name)
	}
	ps, err := b.Store.Preemptions(ctx, uids, jobs, names)
	if err != nil {
		return err
	}
	st.Preemptions = []Preemption{}
	for _, p := range ps {
		role := "preemptor"
		if slices.Contains(uids, p.VictimUID) || slices.Contains(jobs, p.VictimJob) {
			role = "victim"
		}
		st.Preemptions = append(st.Preemptions, Preemption{At: p.At, Role: role, Pod: p.Namespace + "/" + p.VictimPod,
			Job: p.VictimJob, Preemptor: p.Preemptor, Priority: p.PreemptorPriority, Node: p.Node, GPUHours: p.GPUHours})
	}
	return nil
}

func ptr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func firstNonZero(ts ...time.Time) time.Time {
	for _, t := range ts {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}

var titles = map[string]string{
	"not_attempted":                       "not yet attempted",
	string(schedloop.WaitInsufficientGPU): "insufficient GPU",
	string(schedloop.WaitInsufficientCPU): "insufficient CPU/memory",
	string(schedloop.WaitGangIncomplete):  "gang incomplete",
	string(schedloop.WaitQueueLimit):      "queue limit",
	string(schedloop.WaitTopology):        "topology",
	string(schedloop.WaitTaintAffinity):   "taints/affinity",
	string(schedloop.WaitPreemption):      "preemption",
	string(schedloop.WaitQuota):           "waiting for quota",
	string(schedloop.WaitVolume):          "volumes",
	string(schedloop.WaitReserved):        "reserved for a job ahead",
	string(schedloop.WaitOther):           "other",
}

// Title is the short name of a reason category.
func Title(category string) string {
	if t, ok := titles[category]; ok {
		return t
	}
	return category
}

// Label describes one waiting interval from what the scheduler said: the
// category's title with the numbers behind it, e.g. "gang incomplete: 3/8
// members" or "insufficient GPU: 56/64 nodes lack nvidia.com/gpu".
func Label(category string, rs map[string]int, totalNodes int, message string) string {
	title := Title(category)
	// schedloop's own reasons carry their numbers in the text.
	for _, r := range slices.Sorted(maps.Keys(rs)) {
		p, ok := reasons.Parse(r)
		if !ok {
			continue
		}
		switch {
		case p.Kind == reasons.KindGangIncomplete && category == string(schedloop.WaitGangIncomplete):
			return fmt.Sprintf("%s: %d/%d members", title, p.Have, p.Want)
		case p.Kind == reasons.KindGangNoRoom && (category == string(schedloop.WaitInsufficientGPU)) == (p.Short == reasons.ShortGPUs) &&
			(category == string(schedloop.WaitInsufficientGPU) || category == string(schedloop.WaitInsufficientCPU)):
			return fmt.Sprintf("%s: free capacity fits %d/%d members of gang %s/%s", title, p.Have, p.Want, p.Namespace, p.Name)
		case p.Kind == reasons.KindQueueLimit && category == string(schedloop.WaitQueueLimit):
			return fmt.Sprintf("%s: queue %s at its %d-GPU limit", title, p.Name, p.Limit)
		case p.Kind == reasons.KindTopology && category == string(schedloop.WaitTopology):
			return fmt.Sprintf("%s: needs %d GPUs in one %s, largest free has %d", title, p.GPUs, p.Level, p.Largest)
		case p.Kind == reasons.KindReserved && category == string(schedloop.WaitReserved):
			return fmt.Sprintf("%s: %d node(s) held for %s/%s", title, rs[r], p.Namespace, p.Name)
		}
	}
	if category == string(schedloop.WaitInsufficientGPU) {
		lacking := 0
		for r, n := range rs {
			if strings.HasPrefix(r, "Insufficient nvidia.com/") {
				lacking += n
			}
		}
		if lacking > 0 && totalNodes > 0 {
			return fmt.Sprintf("%s: %d/%d nodes lack free nvidia.com/gpu", title, lacking, totalNodes)
		}
	}
	if len(rs) > 0 {
		keys := slices.Sorted(maps.Keys(rs))
		sort.SliceStable(keys, func(i, j int) bool { return rs[keys[i]] > rs[keys[j]] })
		// A count of 0 marks a reason about the pod or job rather than about
		// nodes (a PreFilter rejection, Kueue's quota, a Volcano gang): it is
		// shown without a count.
		var parts []string
		for i, k := range keys {
			if i == 3 {
				break
			}
			if rs[k] == 0 {
				parts = append(parts, k)
				continue
			}
			parts = append(parts, fmt.Sprintf("%d %s", rs[k], k))
		}
		out := title + ": " + strings.Join(parts, ", ")
		if totalNodes > 0 {
			out += fmt.Sprintf(" (of %d nodes)", totalNodes)
		}
		return out
	}
	if message != "" {
		if len(message) > 120 {
			message = message[:117] + "..."
		}
		return title + ": " + message
	}
	return title
}
