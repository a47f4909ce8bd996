package schedplugins_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/harness/player"
	"github.com/schedloop/schedloop/internal/schedplugins"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
	"github.com/schedloop/schedloop/internal/trace"
)

// A high-priority lone pod preempts a running gang whole; the gang's
// members are replaced, as its controller would, and its second run goes
// to the end. The collector stores one job for the gang, its eviction and
// the second run's end, and the simulator's replay of the same jobs evicts
// the same job and runs it again after the preemptor, as live.
func TestPreemptedGangRunsAgainToItsEnd(t *testing.T) {
	ctx := t.Context()
	const speed = 60 // a trace minute per wall second
	nodeClock, err := harness.NewClock(speed)
	if err != nil {
		t.Fatal(err)
	}
	c := harness.NewForTest(t, harness.Options{})
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	e := &env{t: t, c: c}
	nodes := gpuNodes("w", 1, nil)
	if _, err := c.AddNodes(ctx, nodes, harness.NodeOptions{NoExporters: true, Clock: nodeClock}); err != nil {
		t.Fatal(err)
	}
	set := schedplugins.NewSet()
	if _, err := c.StartScheduler(ctx, harness.SchedulerOptions{Config: schedulerConfig(t, c.Kubeconfig), Plugins: set.Options()}); err != nil {
		t.Fatal(err)
	}
	e.setProfileWithTable(set, "whole", "name: whole\n"+orderDoc, 8, nil)

	st := storetest.New(t)
	w, err := events.NewWatcher(events.WatchOptions{Client: c.Client, Dynamic: c.Dynamic, Store: st, FlushInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() { watched <- w.Run(watchCtx) }()
	defer func() {
		stopWatch()
		if err := <-watched; err != nil {
			t.Errorf("watcher: %v", err)
		}
	}()
	e.waitFor("the watcher's informers to list", w.Synced)

	// The gang fills the node's 8 GPUs for 20 minutes; at minute 10 the
	// urgent pod needs all 8 for 5.
	jobs := []trace.Job{
		{Name: "train", Duration: 20 * time.Minute, Members: 2, GPUs: 4, Outcome: trace.Succeeded},
		{Name: "urgent", Arrival: 10 * time.Minute, Duration: 5 * time.Minute, Members: 1, GPUs: 8, Priority: 1000, Outcome: trace.Succeeded},
	}
	// The trace begins now, the cluster ready.
	clock, err := harness.NewClock(speed)
	if err != nil {
		t.Fatal(err)
	}
	p, err := player.New(c.Client, c.Dynamic, jobs, player.Options{Clock: clock, SchedulerName: ours, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	playCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rep, err := p.Run(playCtx)
	if err != nil {
		t.Fatalf("play: %v", err)
	}
	train, urgent := rep.Jobs[0], rep.Jobs[1]
	if train.Evicted != 2 || train.Restarts != 2 || train.Succeeded != 2 || !train.Done() {
		t.Errorf("train: %d members evicted, %d replaced, %d succeeded, done %v; want 2, 2, 2, true",
			train.Evicted, train.Restarts, train.Succeeded, train.Done())
	}
	if urgent.Evicted != 0 || urgent.Succeeded != 1 {
		t.Errorf("urgent: %d evicted, %d succeeded; want 0, 1", urgent.Evicted, urgent.Succeeded)
	}
	// The gang's second run starts once urgent has freed the node.
	if !train.LastStart.After(urgent.Finished.Add(-time.Second)) || !train.Finished.After(urgent.Finished) {
		t.Errorf("train last started %v and finished %v; urgent finished %v: the rerun must follow urgent",
			train.LastStart, train.Finished, urgent.Finished)
	}
	if got := e.preempted("urgent-0", 2); !slices.Equal(got, []string{"train-0", "train-1"}) {
		t.Errorf("preempted for urgent: %v, want both members of train", got)
	}

	// The collector: one job for the gang, finished by its second run and
	// admitted by its first, its two evicted pods and the eviction's cause.
	var gang, lone schedloop.Job
	e.waitFor("both jobs stored as finished", func() bool {
		gang, lone = storedJobOf(ctx, t, c, st, player.MemberPodName("train", 0, 1)), storedJobOf(ctx, t, c, st, "urgent-0")
		return !gang.Finished.IsZero() && !lone.Finished.IsZero()
	})
	if gang.Phase != schedloop.PhaseSucceeded || gang.Kind != schedloop.JobKindGang {
		t.Errorf("train stored as %s %s, want a Succeeded gang", gang.Phase, gang.Kind)
	}
	if gang.Admitted.IsZero() || !gang.Admitted.Before(lone.Admitted) || !gang.Finished.After(lone.Finished) {
		t.Errorf("train admitted %v, finished %v; urgent admitted %v, finished %v: want train admitted first and finished last",
			gang.Admitted, gang.Finished, lone.Admitted, lone.Finished)
	}
	if lone.Kind != schedloop.JobKindPod || lone.Phase != schedloop.PhaseSucceeded {
		t.Errorf("urgent stored as %s %s, want a Succeeded lone pod", lone.Phase, lone.Kind)
	}
	evicted, ran := 0, 0
	pods, err := st.PodsOfJob(ctx, gang.UID)
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods {
		switch {
		case pod.Evicted && pod.Phase == schedloop.PhaseDeleted:
			evicted++
		case pod.Phase == schedloop.PhaseSucceeded:
			ran++
		default:
			t.Errorf("train's pod %s stored %s (evicted %v)", pod.Name, pod.Phase, pod.Evicted)
		}
	}
	if evicted != 2 || ran != 2 {
		t.Errorf("train's pods: %d evicted, %d succeeded; want 2 and 2", evicted, ran)
	}
	e.waitFor("the eviction's cause stored", func() bool {
		ps, err := st.Preemptions(ctx, nil, []string{ns + "/train"}, nil)
		return err == nil && len(ps) == 2 && ps[0].Preemptor == ns+"/urgent-0"
	})

	// The simulator replays the same jobs the same way: urgent evicts
	// train, which starts again once urgent ends and runs its whole
	// duration.
	cfg := sim.Config{Params: set.Profile.Load().Doc.Params(), Preemption: true}
	res, err := sim.Run(sim.NewCluster(trace.Inventory{Nodes: nodes}), sim.JobsFromTrace(jobs), cfg)
	if err != nil {
		t.Fatal(err)
	}
	st0, su := res.Jobs[0], res.Jobs[1]
	if st0.State != sim.Done || st0.Preemptions != 1 || su.Evicted != 1 || su.Start != 10*time.Minute {
		t.Errorf("simulated: train %+v, urgent %+v; want urgent evicting train at 10m", st0, su)
	}
	if st0.FirstStart != 0 || st0.Start != su.End || st0.End != su.End+20*time.Minute {
		t.Errorf("simulated train first started %v, last %v, ended %v; want 0, %v, %v",
			st0.FirstStart, st0.Start, st0.End, su.End, su.End+20*time.Minute)
	}
}

// storedJobOf is the stored job of the pod named pod (zero until both are
// stored).
func storedJobOf(ctx context.Context, t *testing.T, c *harness.Cluster, st *store.Store, pod string) schedloop.Job {
	t.Helper()
	live, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.GetPod(ctx, string(live.UID))
	if errors.Is(err, store.ErrNotFound) || err == nil && p.JobUID == "" {
		return schedloop.Job{}
	}
	if err != nil {
		t.Fatal(err)
	}
	j, err := st.GetJob(ctx, p.JobUID)
	if errors.Is(err, store.ErrNotFound) {
		return schedloop.Job{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return j
}
