package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/schedloop/schedloop/internal/harness/exporter"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/trace"
)

// Names shared with whoever creates pods for the simulated nodes (package
// player does) and whoever reads the nodes.
const (
	// AnnotationDuration is a pod's run time in trace time (a Go duration).
	// A pod without it runs until it is deleted.
	AnnotationDuration = "schedloop.io/duration"
	// AnnotationOutcome is Succeeded (the default) or Failed.
	AnnotationOutcome = "schedloop.io/outcome"
	// AnnotationGPUUtil is the 0..1 utilization of each GPU the pod holds;
	// 0 holds the GPUs idle. Default trace.DefaultUtil.
	AnnotationGPUUtil = "schedloop.io/gpu-util"
	// AnnotationGPUMemFraction is the share of each GPU's memory the pod
	// fills. Default 0.2 + 0.7*util.
	AnnotationGPUMemFraction = "schedloop.io/gpu-mem-fraction"
	// AnnotationExporter on a node is the URL of its simulated dcgm-exporter.
	AnnotationExporter = "schedloop.io/dcgm-exporter"
	// LabelJob on a pod names the trace job it belongs to.
	LabelJob = "schedloop.io/job"
	// LabelQueue is the queue label schedloop accepts (Kueue's).
	LabelQueue = podspec.LabelQueue
	// LabelGPUProduct is the GPU model label GPU feature discovery sets.
	LabelGPUProduct = podspec.LabelGPUProduct
	// ResourceGPU is the whole-GPU extended resource.
	ResourceGPU = podspec.ResourceGPU
)

// NodeOptions configure the simulated machines.
type NodeOptions struct {
	// Clock scales pod run times; nil runs them in real time.
	Clock *Clock
	// Heartbeat is the wall interval between lease renewals and Ready
	// condition updates. Default 10s.
	Heartbeat time.Duration
	// Workers is the number of pods handled at once. Default 4.
	Workers int
	// NoExporters skips the per-node dcgm-exporter endpoints.
	NoExporters bool
	// DRA hands the nodes' GPUs out through Dynamic Resource Allocation, as
	// NVIDIA's DRA driver does, instead of the device plugin's extended
	// resources: each node publishes its GPUs (and MIG partitions) in
	// ResourceSlices and advertises no nvidia.com/gpu, no GPU shares and no
	// MIG resources; the driver's DeviceClasses are installed and the
	// ResourceClaim controller runs. Pods ask through ResourceClaims (from
	// templates) or for nvidia.com/gpu, which the scheduler then serves
	// through DRA. Nodes added without it beside nodes added with it model a
	// cluster migrating from one to the other.
	DRA bool
}

// Nodes are simulated GPU machines registered with a Cluster: Node objects,
// a heartbeat, a pod runner standing in for their kubelets, and one
// dcgm-exporter endpoint each.
type Nodes struct {
	client kubernetes.Interface
	clock  *Clock
	opts   NodeOptions

	mu       sync.Mutex
	machines map[string]*machine
	runs     map[string]*podRun // by pod key namespace/name
	// ended holds the pods this runner ended, by pod key, until its lister
	// shows them ended or gone: see sync.
	ended map[string]*podEnd
	podIP uint32

	exporters map[string]*exporter.Exporter
	queue     workqueue.TypedRateLimitingInterface[string]
	lister    corelisters.PodLister

	started, finished atomic.Int64

	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopOnce sync.Once
}

type machine struct {
	spec trace.Node
	dra  bool // GPUs published in ResourceSlices (NodeOptions.DRA)
	// gpus is what each device has free (milli-GPU), kept with scoring's
	// accounting as the simulator keeps it; only its devices are used.
	gpus *scoring.Node
	uuid []string
	// mig are the instances serving the node's MIG resources, on the
	// partitioned GPUs partUUID names (mig.go).
	mig      []migInstance
	partUUID []string
	// migDevice maps the DRA device name of each instance to its index in
	// mig (dra.go); nil on a node without DRA.
	migDevice map[string]int
}

// podEnd is a pod the runner ended: the status it wrote, or must write
// again if the write failed.
type podEnd struct {
	uid     types.UID
	status  corev1.PodStatus
	written bool
}

// podRun is what the runner knows of a pod it admitted.
type podRun struct {
	uid       types.UID
	node      string
	alloc     scoring.Allocation // the devices and share the pod holds
	mig       []int              // the MIG instances it holds, into machine.mig
	container string
	util, mem float64
	started   time.Time
	finishAt  time.Time // zero: runs until deleted
	outcome   trace.Outcome
	claims    []string // ResourceClaims whose devices the driver prepared
	// claimOf names the claim holding each of the pod's DRA devices, by
	// device name, for the exporter's DRA labels; nil without DRA.
	claimOf map[string]string
}

// AddNodes registers nodes with the cluster, starts their exporters, the
// heartbeat and the pod runner. They stop with the cluster, or at Stop.
func (c *Cluster) AddNodes(ctx context.Context, nodes []trace.Node, opts NodeOptions) (*Nodes, error) {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 10 * time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	clock := opts.Clock
	if clock == nil {
		clock, _ = NewClock(1)
	}
	n := &Nodes{
		client: c.Client, clock: clock, opts: opts,
		machines:  make(map[string]*machine, len(nodes)),
		runs:      map[string]*podRun{},
		ended:     map[string]*podEnd{},
		exporters: map[string]*exporter.Exporter{},
		queue:     workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
	}
	for _, spec := range nodes {
		if err := spec.Validate(); err != nil {
			return nil, err
		}
		if _, dup := n.machines[spec.Name]; dup {
			return nil, fmt.Errorf("node %s: listed twice", spec.Name)
		}
		m := &machine{spec: spec, dra: opts.DRA, gpus: scoring.NewNode(spec.Name, spec.GPUModel, spec.GPUs, 0, 0), uuid: make([]string, spec.GPUs)}
		for i := range m.uuid {
			m.uuid[i] = "GPU-" + uuid.NewSHA1(uuid.NameSpaceOID, []byte(spec.Name+"/"+strconv.Itoa(i))).String()
		}
		var err error
		if m.mig, m.partUUID, err = partitionMIG(spec); err != nil {
			return nil, err
		}
		n.machines[spec.Name] = m
	}
	if opts.DRA {
		if err := c.InstallDeviceClasses(ctx); err != nil {
			return nil, err
		}
		if err := c.startClaimController(ctx); err != nil {
			return nil, err
		}
	}
	ctx, n.cancel = context.WithCancel(ctx)
	n.ctx = ctx
	c.onStop(n.Stop)
	if !opts.NoExporters {
		for name := range n.machines {
			e := exporter.New(name, n)
			if err := e.Serve(); err != nil {
				n.Stop()
				return nil, err
			}
			n.exporters[name] = e
		}
	}
	if err := n.register(ctx); err != nil {
		n.Stop()
		return nil, err
	}
	if err := n.run(ctx); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

// Stop ends the heartbeat, the pod runner and the exporters. Node objects stay.
func (n *Nodes) Stop() {
	n.stopOnce.Do(func() {
		n.cancel()
		n.queue.ShutDown()
		n.wg.Wait()
		for _, e := range n.exporters {
			e.Close()
		}
	})
}

// ExporterURL is the /metrics URL of node's simulated dcgm-exporter.
func (n *Nodes) ExporterURL(node string) string {
	if e := n.exporters[node]; e != nil {
		return e.URL()
	}
	return ""
}

// Exporter is node's simulated dcgm-exporter, nil without one.
func (n *Nodes) Exporter(node string) *exporter.Exporter { return n.exporters[node] }

// Names lists the simulated nodes.
func (n *Nodes) Names() []string {
	out := make([]string, 0, len(n.machines))
	for name := range n.machines {
		out = append(out, name)
	}
	return out
}

// PodsStarted and PodsFinished count pods the runner set Running and ended.
func (n *Nodes) PodsStarted() int64  { return n.started.Load() }
func (n *Nodes) PodsFinished() int64 { return n.finished.Load() }

// GPUs implements exporter.Source: the devices of node and who holds them.
func (n *Nodes) GPUs(node string) []exporter.GPU {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.machines[node]
	if m == nil {
		return nil
	}
	out := make([]exporter.GPU, m.gpus.GPUCap())
	for i := range out {
		out[i] = exporter.GPU{Index: i, UUID: m.uuid[i], Model: modelName(m.spec.GPUModel), MemoryMiB: gpuMemory(m.spec)}
	}
	// dcgm-exporter names one pod per device: a shared device is shown
	// under the pod holding the largest share (the first by key on ties),
	// busy and filled in proportion to each holder's share.
	held := make([]int, len(out))
	for _, key := range slices.Sorted(maps.Keys(n.runs)) {
		r := n.runs[key]
		if r.node != node {
			continue
		}
		share := float64(r.alloc.Milli) / scoring.MilliPerGPU
		for _, i := range r.alloc.Devices {
			g := &out[i]
			if r.alloc.Milli > held[i] {
				ns, name, _ := cache.SplitMetaNamespaceKey(key)
				g.Pod, g.Namespace, g.Container = name, ns, r.container
				g.DRA = draDevice(r, key, node, GPUDeviceName(i))
				held[i] = r.alloc.Milli
			}
			g.Util = min(g.Util+r.util*share, 1)
			g.MemFraction = min(g.MemFraction+r.mem*share, 1)
		}
	}
	return append(out, n.migGPUs(m)...)
}

// modelName undoes GPU feature discovery's label form (spaces become dashes)
// to give the name dcgm-exporter reports: NVIDIA-H100-80GB-HBM3 -> NVIDIA H100 80GB HBM3.
func modelName(label string) string { return strings.ReplaceAll(label, "-", " ") }

func gpuMemory(spec trace.Node) int64 {
	if spec.GPUMemoryMiB > 0 {
		return spec.GPUMemoryMiB
	}
	return 81559 // an 80 GB part, when the inventory does not say
}

// register creates the Node objects and their leases, in parallel.
func (n *Nodes) register(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for name, m := range n.machines {
		g.Go(func() error {
			if err := n.createNode(ctx, m); err != nil {
				return fmt.Errorf("register node %s: %w", name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

func (n *Nodes) createNode(ctx context.Context, m *machine) error {
	spec := m.spec
	labels := map[string]string{
		"kubernetes.io/os":   "linux",
		"kubernetes.io/arch": "amd64",
		trace.LabelHostname:  spec.Name,
	}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	if spec.GPUs > 0 {
		labels[LabelGPUProduct] = spec.GPUModel
		labels["nvidia.com/gpu.count"] = strconv.Itoa(spec.GPUs)
		labels["nvidia.com/gpu.memory"] = strconv.FormatInt(gpuMemory(spec), 10)
		labels["nvidia.com/gpu.present"] = "true"
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: labels}}
	if url := n.ExporterURL(spec.Name); url != "" {
		node.Annotations = map[string]string{AnnotationExporter: url}
	}
	created, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	created.Status = nodeStatus(spec, m.dra, time.Now())
	if _, err := n.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set status: %w", err)
	}
	if m.dra && spec.GPUs > 0 {
		if err := n.publish(ctx, m, created); err != nil {
			return err
		}
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: spec.Name, UID: created.UID}}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(spec.Name), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: time.Now()},
		},
	}
	if _, err := n.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create lease: %w", err)
	}
	return nil
}

// nodeStatus is a Ready node's status; a DRA node (viaDRA) advertises no GPU
// resources, its GPUs being in ResourceSlices.
func nodeStatus(spec trace.Node, viaDRA bool, now time.Time) corev1.NodeStatus {
	cpu, mem := spec.CPUMilli, spec.MemoryMiB
	if cpu == 0 {
		cpu = 128000
	}
	if mem == 0 {
		mem = 1 << 20 // 1 TiB
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(cpu, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(mem<<20, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(256, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	}
	if spec.GPUs > 0 && !viaDRA {
		res[ResourceGPU] = *resource.NewQuantity(int64(spec.GPUs), resource.DecimalSI)
		// Every simulated GPU can be shared: pods ask for a share with
		// podspec.ResourceGPUMilli, and admit honours the device recorded.
		res[podspec.ResourceGPUMilli] = *resource.NewQuantity(int64(spec.GPUs)*scoring.MilliPerGPU, resource.DecimalSI)
	}
	for name, count := range spec.MIG {
		if viaDRA {
			break
		}
		res[corev1.ResourceName(name)] = *resource.NewQuantity(int64(count), resource.DecimalSI)
	}
	t := metav1.NewTime(now)
	cond := func(typ corev1.NodeConditionType, status corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: status, Reason: reason, LastHeartbeatTime: t, LastTransitionTime: t}
	}
	return corev1.NodeStatus{
		Capacity:    res,
		Allocatable: res,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
		},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: spec.Name}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64",
			ContainerRuntimeVersion: "containerd://2.0.0",
		},
	}
}

// run starts the pod informer, the runner's workers and the heartbeat.
func (n *Nodes) run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(n.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName!=" }))
	pods := factory.Core().V1().Pods()
	enqueue := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && n.machines[pod.Spec.NodeName] == nil {
			return
		}
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			n.queue.Add(key)
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	n.lister = pods.Lister()
	factory.Start(ctx.Done())
	n.wg.Add(1)
	go func() { defer n.wg.Done(); <-ctx.Done(); factory.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced) {
		return fmt.Errorf("pod informer did not sync")
	}
	for range n.opts.Workers {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			for n.processNext(ctx) {
			}
		}()
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.heartbeat(ctx) }()
	return nil
}

func (n *Nodes) processNext(ctx context.Context) bool {
	key, quit := n.queue.Get()
	if quit {
		return false
	}
	defer n.queue.Done(key)
	if err := n.sync(ctx, key); err != nil && ctx.Err() == nil {
		n.queue.AddRateLimited(key)
		return true
	}
	n.queue.Forget(key)
	return true
}

// sync moves one pod along Pending -> Running -> Succeeded/Failed, and
// finishes deletions the way a kubelet does.
func (n *Nodes) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := n.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		n.release(key)
		n.forgetEnd(key)
		return nil
	}
	if err != nil {
		return err
	}
	if n.machines[pod.Spec.NodeName] == nil {
		return nil
	}
	n.mu.Lock()
	r, end := n.runs[key], n.ended[key]
	n.mu.Unlock()
	if r != nil && r.uid != pod.UID {
		n.release(key) // a new pod reuses the name
		r = nil
	}
	if end != nil && end.uid != pod.UID {
		n.forgetEnd(key)
		end = nil
	}
	switch {
	case pod.DeletionTimestamp != nil:
		n.release(key)
		n.forgetEnd(key)
		err := n.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
		return nil
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		n.release(key)
		n.forgetEnd(key)
		return nil
	case end != nil:
		// Ended here, and the lister, behind the write, still shows it
		// running: it must not be admitted again, as it was when this
		// runner knew only the pods it ran (a DRA replay started 39 pods
		// of 38, one twice, holding a node's GPUs after the replay).
		return n.writeEnd(ctx, pod, end)
	}
	if r == nil {
		return n.admit(ctx, key, pod)
	}
	if r.finishAt.IsZero() {
		return nil
	}
	if wait := time.Until(r.finishAt); wait > 0 {
		n.queue.AddAfter(key, wait)
		return nil
	}
	return n.finish(ctx, key, pod, r)
}

// admit gives the pod its GPUs and marks it Running, or fails it the way a
// kubelet does when the devices are not there.
func (n *Nodes) admit(ctx context.Context, key string, pod *corev1.Pod) error {
	want := podspec.Request(pod)
	want = scoring.Request{GPUs: want.GPUs, GPUMilli: want.GPUMilli}
	now := time.Now()
	r := &podRun{uid: pod.UID, node: pod.Spec.NodeName, started: now, outcome: trace.Succeeded,
		container: pod.Spec.Containers[0].Name, util: trace.DefaultUtil}
	if err := readProfile(pod, r, n.clock); err != nil {
		return n.patchStatus(ctx, pod, failedStatus(pod, now, "InvalidAnnotation", err.Error()))
	}
	m := n.machines[r.node]
	var draGPUs, draMIG []int
	if m.dra {
		// As the kubelet does, the pod starts once its claims are allocated
		// and reserved for it and the driver has prepared their devices.
		gpus, mig, claims, claimOf, err := n.draDevices(ctx, m, pod)
		if err != nil {
			return err
		}
		r.claimOf = claimOf
		for _, c := range claims {
			r.claims = append(r.claims, c.Name)
		}
		draGPUs, draMIG = gpus, mig
		want = scoring.Request{GPUs: len(gpus)}
		if err := n.markPrepared(ctx, pod.Namespace, r.claims, r.node, true); err != nil {
			return err
		}
	}
	n.mu.Lock()
	// The devices the scheduler recorded, as a share-aware device plugin
	// honours them; a pod placed without a record gets what fits best.
	devices, recorded := podspec.Devices(pod)
	if m.dra {
		devices, recorded = draGPUs, true
	}
	if !recorded {
		devices = scoring.BestFitDevices(m.gpus, want)
	}
	alloc, err := m.gpus.Allocate(want, devices)
	if err != nil && want.GPUs > 0 {
		n.mu.Unlock()
		msg := fmt.Sprintf("Allocate failed: devices %v cannot serve %d GPUs (%d milli-GPU each): %v", devices, want.GPUs, want.TotalGPUMilli()/int64(want.GPUs), err)
		return n.patchStatus(ctx, pod, failedStatus(pod, now, "UnexpectedAdmissionError", msg))
	}
	if m.dra {
		r.mig, err = m.holdMIG(key, draMIG)
	} else {
		r.mig, err = m.takeMIG(key, pod)
	}
	if err != nil {
		m.gpus.Release(alloc)
		n.mu.Unlock()
		return n.patchStatus(ctx, pod, failedStatus(pod, now, "UnexpectedAdmissionError", "Allocate failed: "+err.Error()))
	}
	r.alloc = alloc
	n.runs[key] = r
	n.podIP++
	ip := n.podIP
	n.mu.Unlock()

	// Counted before the API shows it running, as the end is below: a
	// reader that saw the pod run through the API must find it counted.
	n.started.Add(1)
	if err := n.patchStatus(ctx, pod, runningStatus(pod, now, ip)); err != nil {
		n.started.Add(-1)
		n.release(key)
		return err
	}
	if !r.finishAt.IsZero() {
		n.queue.AddAfter(key, time.Until(r.finishAt))
	}
	return nil
}

func (n *Nodes) finish(ctx context.Context, key string, pod *corev1.Pod, r *podRun) error {
	end := &podEnd{uid: pod.UID, status: terminatedStatus(pod, r, time.Now())}
	// Free the devices before the API says the pod ended: the scheduler
	// counts a terminal pod's GPUs as free at once, and a pod it binds in that
	// instant must find them free here too, or it fails admission.
	n.release(key)
	n.mu.Lock()
	n.ended[key] = end
	n.mu.Unlock()
	// Counted before the API says so too: a replay ends when it sees its
	// last pod end, and its caller reads the count at once; counted after
	// the write, the count could trail what the API already showed.
	n.finished.Add(1)
	return n.writeEnd(ctx, pod, end)
}

// writeEnd writes the status of a pod this runner ended, until a write
// goes through.
func (n *Nodes) writeEnd(ctx context.Context, pod *corev1.Pod, end *podEnd) error {
	n.mu.Lock()
	written := end.written
	n.mu.Unlock()
	if written {
		return nil
	}
	if err := n.patchStatus(ctx, pod, end.status); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	n.mu.Lock()
	end.written = true
	n.mu.Unlock()
	return nil
}

func (n *Nodes) forgetEnd(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.ended, key)
}

// release frees the GPUs a pod held.
func (n *Nodes) release(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r := n.runs[key]
	if r == nil {
		return
	}
	delete(n.runs, key)
	if m := n.machines[r.node]; m != nil {
		m.gpus.Release(r.alloc)
		m.releaseMIG(r.mig)
	}
	if len(r.claims) > 0 && n.ctx.Err() == nil {
		// The plugin unprepares the devices; a claim already released by
		// the ResourceClaim controller is left as it is.
		ns, _, _ := cache.SplitMetaNamespaceKey(key)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			_ = n.markPrepared(n.ctx, ns, r.claims, r.node, false)
		}()
	}
}

// readProfile fills r's run time, outcome and GPU profile from the pod's annotations.
func readProfile(pod *corev1.Pod, r *podRun, clock *Clock) error {
	a := pod.Annotations
	if s, ok := a[AnnotationDuration]; ok {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return fmt.Errorf("annotation %s: %q is not a non-negative duration", AnnotationDuration, s)
		}
		r.finishAt = r.started.Add(clock.Wall(d))
	}
	if s, ok := a[AnnotationOutcome]; ok {
		switch trace.Outcome(s) {
		case trace.Succeeded, trace.Failed:
			r.outcome = trace.Outcome(s)
		default:
			return fmt.Errorf("annotation %s: %q is not %s or %s", AnnotationOutcome, s, trace.Succeeded, trace.Failed)
		}
	}
	var err error
	if r.util, err = fraction(a, AnnotationGPUUtil, trace.DefaultUtil); err != nil {
		return err
	}
	if r.mem, err = fraction(a, AnnotationGPUMemFraction, 0.2+0.7*r.util); err != nil {
		return err
	}
	return nil
}

func fraction(a map[string]string, key string, def float64) (float64, error) {
	s, ok := a[key]
	if !ok {
		return def, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0 && v <= 1) {
		return 0, fmt.Errorf("annotation %s: %q is not a number in 0..1", key, s)
	}
	return v, nil
}

func runningStatus(pod *corev1.Pod, now time.Time, ip uint32) corev1.PodStatus {
	t := metav1.NewTime(now)
	podIP := fmt.Sprintf("10.%d.%d.%d", 64+(ip>>16)&63, (ip>>8)&255, ip&255)
	st := corev1.PodStatus{
		Phase: corev1.PodRunning, StartTime: &t, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}},
		HostIP: "192.168.0.1", QOSClass: qosClass(pod),
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: t},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t},
		},
	}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
			ContainerID: "containerd://" + string(pod.UID) + "-" + c.Name,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
		})
	}
	return st
}

func terminatedStatus(pod *corev1.Pod, r *podRun, now time.Time) corev1.PodStatus {
	st := *pod.Status.DeepCopy()
	start, end := metav1.NewTime(r.started), metav1.NewTime(now)
	st.Phase, st.Reason = corev1.PodSucceeded, ""
	code, reason := int32(0), "Completed"
	if r.outcome == trace.Failed {
		st.Phase, code, reason = corev1.PodFailed, 1, "Error"
	}
	for i, c := range st.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			st.Conditions[i].Status, st.Conditions[i].Reason, st.Conditions[i].LastTransitionTime = corev1.ConditionFalse, "PodCompleted", end
		}
	}
	for i := range st.ContainerStatuses {
		cs := &st.ContainerStatuses[i]
		cs.Ready, cs.Started = false, ptr.To(false)
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, StartedAt: start, FinishedAt: end, ContainerID: cs.ContainerID,
		}}
	}
	return st
}

func failedStatus(pod *corev1.Pod, now time.Time, reason, msg string) corev1.PodStatus {
	t := metav1.NewTime(now)
	return corev1.PodStatus{Phase: corev1.PodFailed, Reason: reason, Message: msg, StartTime: &t, QOSClass: qosClass(pod)}
}

func qosClass(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return corev1.PodQOSBestEffort
}

// patchStatus replaces the pod's status in one request; the UID in the
// patch makes it fail if the pod was replaced meanwhile.
func (n *Nodes) patchStatus(ctx context.Context, pod *corev1.Pod, st corev1.PodStatus) error {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status":   st,
	})
	if err != nil {
		return err
	}
	_, err = n.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patch pod %s/%s status: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// heartbeat renews each node's lease and Ready condition until ctx ends.
func (n *Nodes) heartbeat(ctx context.Context) {
	t := time.NewTicker(n.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for name := range n.machines {
			if ctx.Err() != nil {
				return
			}
			n.beat(ctx, name)
		}
	}
}

func (n *Nodes) beat(ctx context.Context, name string) {
	now := time.Now()
	leases := n.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	if l, err := leases.Get(ctx, name, metav1.GetOptions{}); err == nil {
		l.Spec.RenewTime = &metav1.MicroTime{Time: now}
		_, _ = leases.Update(ctx, l, metav1.UpdateOptions{}) // the next beat retries
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
		"type": corev1.NodeReady, "status": corev1.ConditionTrue, "reason": "KubeletReady",
		"lastHeartbeatTime": metav1.NewTime(now),
	}}}})
	_, _ = n.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
}
