// Package player replays a trace into a harness cluster: at each job's
// arrival time (on the harness clock) it creates the job's PodGroup and
// member pods, so a real scheduler has real work, and it records when each
// job's pods ran and ended. It stands in for the job controllers too: a
// member evicted (deleted with the DisruptionTarget condition, as
// preemption deletes its victims) is replaced by a new pod of the same job
// in the same gang, which runs the job's whole duration again, as a
// Job/JobSet controller recreates an evicted job's pods and the simulator
// runs an evicted job again from its start.
//
// It makes no placement decisions; the scheduler under test does.
package player

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/dra"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
)

// Options configure a Player.
type Options struct {
	Clock         *harness.Clock // required: maps arrival times to wall time
	Namespace     string         // default "default"
	SchedulerName string         // default the cluster's default scheduler
	// ScheduleTimeoutSeconds, when set, goes into each PodGroup and
	// overrides the profile's gang timeout for it. Default unset: the
	// profile decides, as it does in the tuner's replays. The Workload API
	// has no such field: New refuses it with GangAPI podgroup.APIWorkload.
	ScheduleTimeoutSeconds int32
	// GangAPI is how each job of more than one pod is declared as a gang
	// (a job of one pod is a plain pod under either): podgroup.APIPodGroup
	// (the default) a scheduler-plugins PodGroup and pods labelled into it;
	// podgroup.APIWorkload a Workload with one gang template, the PodGroup
	// made from it, and pods naming it in spec.schedulingGroup (the cluster
	// must serve scheduling.k8s.io/v1beta1, as the harness's does).
	GangAPI podgroup.API
	// Submitters is how many jobs are created at once. Default 8.
	Submitters int
	// GPUClaims has each member ask for its whole GPUs through a
	// ResourceClaimTemplate of NVIDIA's GPU class (one per GPU count,
	// ClaimTemplateName) instead of as nvidia.com/gpu, as a workload
	// written for NVIDIA's DRA driver does. Only nodes publishing GPUs in
	// ResourceSlices serve them (harness.NodeOptions.DRA). Shares are asked
	// for as before.
	GPUClaims bool
	// ClaimsFor, when set, picks the jobs that ask through claim templates
	// (as GPUClaims does for all), so both kinds of request can be mixed.
	ClaimsFor func(trace.Job) bool
}

// Player submits a trace's jobs and follows their pods.
type Player struct {
	client kubernetes.Interface
	dyn    dynamic.Interface
	jobs   []trace.Job
	names  []string // Kubernetes name of each job
	opts   Options

	uids map[string]string // Job controller UID of each lone job (podspec.LoneJob)

	mu        sync.Mutex
	templates map[string]bool       // claim templates created, by name
	results   map[string]*JobResult // by job name (Kubernetes form)
	changed   chan struct{}         // closed and replaced when a result changes
	// runCtx is Run's context, under which evicted members are replaced;
	// rerunErr is the first replacement that could not be created.
	runCtx   context.Context
	rerunErr error
}

// JobResult is what happened to one job. Times are wall times observed by
// the player.
type JobResult struct {
	Job       trace.Job
	Name      string // Kubernetes name: PodGroup and pod-name prefix
	Submitted time.Time
	// FirstStart and LastStart bracket the members going Running.
	FirstStart, LastStart time.Time
	Finished              time.Time // last member ended
	Succeeded, Failed     int       // members in each terminal phase
	// Deleted counts members removed before they ended other than by an
	// eviction: nothing replaces them.
	Deleted int
	// Evicted counts members deleted by an eviction (podspec.Evicted), each
	// replaced by a new pod (Restarts counts those created) that runs the
	// job's whole duration again.
	Evicted, Restarts int
	Nodes             []string // node of each member that ran, in start order
	pods              map[string]*podSeen
	replaced          map[int]int // replacements of each member so far
}

type podSeen struct {
	started, ended bool
	member         int // index of the member the pod is, -1 when not known
}

// Done reports whether every member has ended without being replaced.
func (r *JobResult) Done() bool { return r.Succeeded+r.Failed+r.Deleted == r.Job.Members }

// MemberPodName is the name of the pod of job's member that replaces its
// restart-th eviction (0: the member's first pod).
func MemberPodName(job string, member, restart int) string {
	if restart == 0 {
		return fmt.Sprintf("%s-%d", job, member)
	}
	return fmt.Sprintf("%s-%d-r%d", job, member, restart)
}

// Report is the outcome of a replay.
type Report struct {
	Jobs         []JobResult // in trace order
	Began, Ended time.Time   // first submission, last job end
}

// JobsPerSecond is the number of finished jobs per wall second of the replay.
func (r Report) JobsPerSecond() float64 {
	d := r.Ended.Sub(r.Began).Seconds()
	if d <= 0 {
		return 0
	}
	n := 0
	for _, j := range r.Jobs {
		if j.Done() {
			n++
		}
	}
	return float64(n) / d
}

var (
	invalidName  = regexp.MustCompile(`[^a-z0-9-]+`)
	invalidLabel = regexp.MustCompile(`[^A-Za-z0-9._-]+`)
)

// KubeName turns a trace job name into a valid PodGroup/pod name prefix.
func KubeName(job string) string {
	s := strings.Trim(invalidName.ReplaceAllString(strings.ToLower(job), "-"), "-")
	if len(s) > 50 {
		s = s[:50]
	}
	return strings.TrimRight(s, "-")
}

// New prepares a replay of jobs. It does not touch the cluster yet.
func New(client kubernetes.Interface, dyn dynamic.Interface, jobs []trace.Job, opts Options) (*Player, error) {
	if opts.Clock == nil {
		return nil, fmt.Errorf("player: a clock is required")
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.Submitters <= 0 {
		opts.Submitters = 8
	}
	switch opts.GangAPI {
	case "":
		opts.GangAPI = podgroup.APIPodGroup
	case podgroup.APIPodGroup:
	case podgroup.APIWorkload:
		if opts.ScheduleTimeoutSeconds > 0 {
			return nil, fmt.Errorf("player: ScheduleTimeoutSeconds %d: the Workload API has no schedule timeout; set gangTimeoutSeconds in the profile instead", opts.ScheduleTimeoutSeconds)
		}
	default:
		if _, err := podgroup.ParseAPI(string(opts.GangAPI)); err != nil {
			return nil, fmt.Errorf("player: %w", err)
		}
	}
	jobs = append([]trace.Job(nil), jobs...)
	trace.SortByArrival(jobs)
	p := &Player{client: client, dyn: dyn, jobs: jobs, opts: opts, uids: map[string]string{},
		results: make(map[string]*JobResult, len(jobs)), changed: make(chan struct{})}
	for _, j := range jobs {
		if err := j.Validate(); err != nil {
			return nil, err
		}
		name := KubeName(j.Name)
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 || name == "" {
			return nil, fmt.Errorf("job %q: no valid Kubernetes name (%q: %s)", j.Name, name, strings.Join(errs, "; "))
		}
		if prev, dup := p.results[name]; dup {
			return nil, fmt.Errorf("job %q: Kubernetes name %q is taken by job %q", j.Name, name, prev.Job.Name)
		}
		p.names = append(p.names, name)
		p.results[name] = &JobResult{Job: j, Name: name, pods: map[string]*podSeen{}}
		if !gang(j) {
			p.uids[name] = string(uuid.NewUUID())
		}
	}
	return p, nil
}

// Run submits every job at its arrival time and waits until all have ended.
func (p *Player) Run(ctx context.Context) (Report, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.mu.Lock()
	p.runCtx = ctx
	p.mu.Unlock()
	if err := p.watch(ctx); err != nil {
		return Report{}, err
	}
	if err := p.Submit(ctx); err != nil {
		return p.Report(), err
	}
	return p.Wait(ctx)
}

// Submit creates priority classes, then each job's PodGroup and pods at its
// arrival time. It returns once the last job is submitted.
func (p *Player) Submit(ctx context.Context) error {
	if err := p.EnsurePriorityClasses(ctx); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(p.opts.Submitters)
	for i, j := range p.jobs {
		wait := time.Until(p.opts.Clock.WallAt(j.Arrival))
		if wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return g.Wait()
			case <-timer.C:
			}
		}
		name := p.names[i]
		g.Go(func() error { return p.submit(ctx, name, j) })
	}
	return g.Wait()
}

func (p *Player) submit(ctx context.Context, name string, j trace.Job) error {
	p.mu.Lock()
	p.results[name].Submitted = time.Now()
	p.mu.Unlock()
	if err := p.Declare(ctx, name, j); err != nil {
		return err
	}
	return p.createPods(ctx, name, j)
}

// Declare creates the group object of trace job j, whose Kubernetes name
// is name, as Submit does before its pods (Options.GangAPI): for drivers
// that create pods on a schedule of their own (Pod). A job of one pod
// declares nothing (gang).
func (p *Player) Declare(ctx context.Context, name string, j trace.Job) error {
	if !gang(j) {
		return nil
	}
	if p.opts.GangAPI == podgroup.APIWorkload {
		return p.submitWorkload(ctx, name, j)
	}
	pg := podgroup.New(p.opts.Namespace, name, int32(j.Members))
	if p.opts.ScheduleTimeoutSeconds > 0 {
		pg.Spec.ScheduleTimeoutSeconds = ptr.To(p.opts.ScheduleTimeoutSeconds)
	}
	pg.Labels = map[string]string{harness.LabelJob: name}
	if j.Queue != "" {
		pg.Labels[harness.LabelQueue] = queueLabel(j.Queue)
	}
	if _, err := podgroup.Create(ctx, p.dyn, pg); err != nil {
		return fmt.Errorf("job %s: %w", j.Name, err)
	}
	return nil
}

// submitWorkload declares job j as a job controller does with the Workload
// API: a Workload whose one gang template needs every member, and the
// PodGroup made from it.
// gang reports whether job j is declared as a gang: a job of one pod is a
// lone pod, as the simulator replays it (a lone pod preempts, is ordered
// before gangs on a tie and never backs off as a gang) and as the tuner
// imports it. Declared as a pod group of one it would be neither: under
// the Workload API kube-scheduler runs no PostFilter in a pod group's
// cycle, so it could never preempt.
func gang(j trace.Job) bool { return j.Members > 1 }

func (p *Player) submitWorkload(ctx context.Context, name string, j trace.Job) error {
	w, pg := podgroup.NewWorkload(p.opts.Namespace, name, int32(j.Members))
	labels := map[string]string{harness.LabelJob: name}
	if j.Queue != "" {
		labels[harness.LabelQueue] = queueLabel(j.Queue)
	}
	w.Labels, pg.Labels = labels, maps.Clone(labels)
	if j.Priority != 0 {
		// kube-scheduler refuses a pod group whose pods' priority is not
		// the group's own.
		pg.Spec.PriorityClassName = PriorityClassName(j.Priority)
	}
	if err := podgroup.CreateWorkload(ctx, p.client, w, pg); err != nil {
		return fmt.Errorf("job %s: %w", j.Name, err)
	}
	return nil
}

func (p *Player) createPods(ctx context.Context, name string, j trace.Job) error {
	for _, t := range p.claimTemplates(j) {
		if err := p.ensureTemplate(ctx, t.tpl); err != nil {
			return fmt.Errorf("job %s: %w", j.Name, err)
		}
	}
	for m := range j.Members {
		pod := p.pod(name, m, j)
		if _, err := p.client.CoreV1().Pods(p.opts.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("job %s: create pod %s: %w", j.Name, pod.Name, err)
		}
	}
	return nil
}

// queueLabel keeps a queue name within label-value rules.
func queueLabel(q string) string {
	s := strings.Trim(invalidLabel.ReplaceAllString(q, "-"), "-._")
	if len(s) > 63 {
		s = s[:63]
	}
	return s
}

// PriorityClassName is the class the player creates for a priority value.
func PriorityClassName(p int32) string {
	if p < 0 {
		return "schedloop-priority-minus-" + strconv.Itoa(-int(p))
	}
	return "schedloop-priority-" + strconv.Itoa(int(p))
}

// EnsurePriorityClasses creates the priority class of every priority the
// trace uses (Submit does this first) and returns once the apiserver
// admits objects naming them.
func (p *Player) EnsurePriorityClasses(ctx context.Context) error {
	seen := map[int32]bool{0: true} // priority 0 needs no class
	for _, j := range p.jobs {
		if seen[j.Priority] {
			continue
		}
		seen[j.Priority] = true
		pc := &schedulingv1.PriorityClass{
			ObjectMeta:  metav1.ObjectMeta{Name: PriorityClassName(j.Priority)},
			Value:       j.Priority,
			Description: "trace priority " + strconv.Itoa(int(j.Priority)),
		}
		if err := harness.CreatePriorityClass(ctx, p.client, p.opts.Namespace, pc); err != nil {
			return err
		}
	}
	return nil
}

// Pod is the pod Submit creates for member of trace job j, whose
// Kubernetes name is job: for drivers that create pods on a schedule of
// their own and must ask for exactly what a replay asks for.
func (p *Player) Pod(job string, member int, j trace.Job) *corev1.Pod { return p.pod(job, member, j) }

func (p *Player) pod(job string, member int, j trace.Job) *corev1.Pod {
	labels := map[string]string{harness.LabelJob: job}
	if gang(j) && p.opts.GangAPI != podgroup.APIWorkload {
		labels[podgroup.LabelPodGroup] = job
	}
	if uid := p.uids[job]; uid != "" {
		// As the Job controller labels its pods: a pod replacing an
		// evicted one continues the same job (podspec.LoneJob).
		labels[batchv1.ControllerUidLabel] = uid
		labels[batchv1.JobNameLabel] = job
	}
	if j.Queue != "" {
		labels[harness.LabelQueue] = queueLabel(j.Queue)
	}
	if j.NonPreemptible {
		labels[podspec.LabelPreemptible] = "false"
	}
	ann := map[string]string{
		harness.AnnotationDuration: j.Duration.String(),
		harness.AnnotationOutcome:  string(j.Outcome),
		harness.AnnotationGPUUtil:  strconv.FormatFloat(j.Util, 'f', -1, 64),
	}
	// The member's request as the simulator models it (sim.RequestOf),
	// written the way podspec reads it back: a share as
	// podspec.ResourceGPUMilli, whole GPUs as podspec.ResourceGPU.
	requests := podspec.Resources(sim.RequestOf(j))
	res := corev1.ResourceList{} // extended resources must be limits too
	for name, q := range requests {
		if name == podspec.ResourceGPU || name == podspec.ResourceGPUMilli || strings.HasPrefix(string(name), podspec.ResourceMIGPrefix) {
			res[name] = q
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: MemberPodName(job, member, 0), Namespace: p.opts.Namespace,
			Labels: labels, Annotations: ann,
		},
		Spec: corev1.PodSpec{
			SchedulerName: p.opts.SchedulerName,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.local/schedloop/sim-job:latest",
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: res},
			}},
		},
	}
	for _, t := range p.claimTemplates(j) {
		delete(requests, t.replaces)
		delete(res, t.replaces)
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: t.claim, ResourceClaimTemplateName: ptr.To(t.tpl.Name)})
		pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: t.claim})
	}
	if gang(j) && p.opts.GangAPI == podgroup.APIWorkload {
		pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(job)}
	}
	if j.Priority != 0 {
		pod.Spec.PriorityClassName = PriorityClassName(j.Priority)
	}
	if len(j.GPUModels) > 0 {
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: harness.LabelGPUProduct, Operator: corev1.NodeSelectorOpIn, Values: j.GPUModels,
				}},
			}}},
		}}
	}
	return pod
}

// watch follows the trace's pods and records starts and ends.
func (p *Player) watch(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(p.client, 0,
		informers.WithNamespace(p.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = harness.LabelJob }))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.observe(obj) },
		UpdateFunc: func(_, obj any) { p.observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			p.observeDeleted(obj)
		},
	}); err != nil {
		return fmt.Errorf("watch trace pods: %w", err)
	}
	factory.Start(ctx.Done())
	go func() { <-ctx.Done(); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("watch trace pods: cache did not sync")
	}
	return nil
}

func (p *Player) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.results[pod.Labels[harness.LabelJob]]
	if r == nil {
		return
	}
	seen := r.seen(pod)
	phase := pod.Status.Phase
	terminal := phase == corev1.PodSucceeded || phase == corev1.PodFailed
	// A pod that ended before the player saw it running still ran if the
	// runner gave it a start time.
	ran := phase == corev1.PodRunning || (terminal && pod.Status.StartTime != nil && pod.Spec.NodeName != "")
	if ran && !seen.started {
		seen.started = true
		if r.FirstStart.IsZero() {
			r.FirstStart = now
		}
		r.LastStart = now
		r.Nodes = append(r.Nodes, pod.Spec.NodeName)
	}
	if !terminal || seen.ended {
		return
	}
	seen.ended = true
	if phase == corev1.PodSucceeded {
		r.Succeeded++
	} else {
		r.Failed++
	}
	if r.Done() {
		r.Finished = now
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// seen is what the player saw of pod, a member of r. Called with p.mu held.
func (r *JobResult) seen(pod *corev1.Pod) *podSeen {
	s := r.pods[pod.Name]
	if s == nil {
		s = &podSeen{member: memberOf(r.Name, pod.Name)}
		r.pods[pod.Name] = s
	}
	return s
}

// memberOf reads the member index from a pod name MemberPodName made, -1
// if it is not one.
func memberOf(job, pod string) int {
	rest, ok := strings.CutPrefix(pod, job+"-")
	if !ok {
		return -1
	}
	rest, _, _ = strings.Cut(rest, "-r")
	m, err := strconv.Atoi(rest)
	if err != nil || m < 0 {
		return -1
	}
	return m
}

// observeDeleted ends a member that was deleted before it ended, and puts a
// new pod in the place of an evicted one while Run runs.
func (p *Player) observeDeleted(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.results[pod.Labels[harness.LabelJob]]
	if r == nil {
		return
	}
	seen := r.seen(pod)
	if seen.ended {
		return
	}
	seen.ended = true
	if podspec.Evicted(pod) && seen.member >= 0 && p.runCtx != nil {
		r.Evicted++
		r.Restarts++
		if r.replaced == nil {
			r.replaced = map[int]int{}
		}
		r.replaced[seen.member]++
		name := MemberPodName(r.Name, seen.member, r.replaced[seen.member])
		r.pods[name] = &podSeen{member: seen.member}
		go p.replace(p.runCtx, r.Name, r.Job, seen.member, name)
	} else {
		r.Deleted++
	}
	if r.Done() {
		r.Finished = time.Now()
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// replace creates the pod named name in place of job's evicted member: the
// same request, gang and duration, as the job's controller would.
func (p *Player) replace(ctx context.Context, job string, j trace.Job, member int, name string) {
	pod := p.pod(job, member, j)
	pod.Name = name
	_, err := p.client.CoreV1().Pods(p.opts.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err == nil || ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rerunErr == nil {
		p.rerunErr = fmt.Errorf("job %s: replace evicted member %d with pod %s: %w", j.Name, member, name, err)
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// Wait blocks until every submitted job has ended, or ctx ends.
func (p *Player) Wait(ctx context.Context) (Report, error) {
	for {
		p.mu.Lock()
		done := true
		for _, r := range p.results {
			if !r.Done() {
				done = false
				break
			}
		}
		ch, err := p.changed, p.rerunErr
		p.mu.Unlock()
		if err != nil {
			return p.Report(), err
		}
		if done {
			return p.Report(), nil
		}
		select {
		case <-ctx.Done():
			return p.Report(), fmt.Errorf("wait for trace jobs: %w", ctx.Err())
		case <-ch:
		}
	}
}

// Report is a snapshot of the results so far.
func (p *Player) Report() Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	rep := Report{Jobs: make([]JobResult, len(p.names))}
	for i, name := range p.names {
		r := *p.results[name]
		r.Nodes = append([]string(nil), r.Nodes...)
		r.pods, r.replaced = nil, nil
		rep.Jobs[i] = r
		if !r.Submitted.IsZero() && (rep.Began.IsZero() || r.Submitted.Before(rep.Began)) {
			rep.Began = r.Submitted
		}
		if r.Finished.After(rep.Ended) {
			rep.Ended = r.Finished
		}
	}
	return rep
}

func (p *Player) viaClaims(j trace.Job) bool {
	return p.opts.GPUClaims || p.opts.ClaimsFor != nil && p.opts.ClaimsFor(j)
}

// EnsureClaimTemplates creates the claim template of every GPU count and
// MIG profile the jobs asking through claims need, for drivers that create
// pods themselves (Pod).
func (p *Player) EnsureClaimTemplates(ctx context.Context) error {
	for _, j := range p.jobs {
		for _, t := range p.claimTemplates(j) {
			if err := p.ensureTemplate(ctx, t.tpl); err != nil {
				return err
			}
		}
	}
	return nil
}

// ClaimTemplateName is the ResourceClaimTemplate through which a member
// asks for gpus whole GPUs (Options.GPUClaims).
func ClaimTemplateName(gpus int) string { return "schedloop-gpus-" + strconv.Itoa(gpus) }

// MIGClaimTemplateName is the ResourceClaimTemplate through which a
// member asks for count MIG instances of profile.
func MIGClaimTemplateName(profile string, count int) string {
	return "schedloop-mig-" + strings.ReplaceAll(profile, ".", "") + "-" + strconv.Itoa(count)
}

// podClaim is one claim a member of a job asking through claims holds:
// the pod's name for it, its template, and the extended resource it
// stands in for.
type podClaim struct {
	claim    string
	tpl      *resourcev1.ResourceClaimTemplate
	replaces corev1.ResourceName
}

// claimTemplates are the claims a member of j holds when j asks through
// claims: its whole GPUs from NVIDIA's GPU class, and the MIG instances of
// each profile from its MIG class, the profile picked by the attribute the
// driver publishes. Shares are asked for as extended resources still.
func (p *Player) claimTemplates(j trace.Job) []podClaim {
	if !p.viaClaims(j) {
		return nil
	}
	exact := func(name, request, class string, count int, selectors []resourcev1.DeviceSelector) *resourcev1.ResourceClaimTemplate {
		return &resourcev1.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.opts.Namespace},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: request, Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(count),
					Selectors: selectors,
				}}},
			}}},
		}
	}
	var out []podClaim
	r := sim.RequestOf(j)
	if r.GPUs > 0 && !r.Shared() {
		out = append(out, podClaim{claim: "gpus", tpl: exact(ClaimTemplateName(r.GPUs), "gpus", dra.ClassGPU, r.GPUs, nil), replaces: podspec.ResourceGPU})
	}
	named := r.NamedMIG()
	for i, profile := range slices.Sorted(maps.Keys(named)) {
		sel := []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes[%q].%s == %q", dra.Driver, dra.AttrProfile, profile)}}}
		out = append(out, podClaim{claim: "mig-" + strconv.Itoa(i), tpl: exact(MIGClaimTemplateName(profile, named[profile]), "mig", dra.ClassMIG, named[profile], sel),
			replaces: corev1.ResourceName(podspec.ResourceMIGPrefix + profile)})
	}
	return out
}

// ensureTemplate creates tpl once.
func (p *Player) ensureTemplate(ctx context.Context, tpl *resourcev1.ResourceClaimTemplate) error {
	p.mu.Lock()
	done := p.templates[tpl.Name]
	p.mu.Unlock()
	if done {
		return nil
	}
	_, err := p.client.ResourceV1().ResourceClaimTemplates(p.opts.Namespace).Create(ctx, tpl, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ResourceClaimTemplate %s: %w", tpl.Name, err)
	}
	p.mu.Lock()
	if p.templates == nil {
		p.templates = map[string]bool{}
	}
	p.templates[tpl.Name] = true
	p.mu.Unlock()
	return nil
}
