package schedplugins_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/reasons"
	"github.com/schedloop/schedloop/internal/schedplugins"
)

// ranFor writes a start time ago into the pods' status, as if they had
// been running that long: preemption reads what a victim would lose from
// it.
func (e *env) ranFor(ago time.Duration, pods ...string) {
	e.t.Helper()
	at := metav1.NewTime(time.Now().Add(-ago))
	patch := fmt.Appendf(nil, `{"status":{"startTime":%q}}`, at.UTC().Format(time.RFC3339))
	for _, name := range pods {
		e.waitRunning(name)
		if _, err := e.c.Client.CoreV1().Pods(ns).Patch(e.t.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			e.t.Fatalf("stamp the start of %s: %v", name, err)
		}
	}
}

// preempted waits for the scheduler's "Preempted" Events naming preemptor
// as the related object (they are recorded asynchronously) until there are
// want of them, and lists the pods they name, sorted.
func (e *env) preempted(preemptor string, want int) []string {
	e.t.Helper()
	var out []string
	defer func() {
		if e.t.Failed() {
			evs, _ := e.c.Client.EventsV1().Events(ns).List(e.t.Context(), metav1.ListOptions{})
			for _, ev := range evs.Items {
				e.t.Logf("event %s %s %v: %s", ev.Reason, ev.Regarding.Name, ev.Related, ev.Note)
			}
		}
	}()
	e.waitFor(fmt.Sprintf("%d Preempted events for %s", want, preemptor), func() bool {
		out = e.preemptedNow(preemptor)
		return len(out) >= want
	})
	return out
}

func (e *env) preemptedNow(preemptor string) []string {
	e.t.Helper()
	evs, err := e.c.Client.EventsV1().Events(ns).List(e.t.Context(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs.Items {
		if ev.Reason == "Preempted" && ev.Related != nil && ev.Related.Name == preemptor {
			out = append(out, ev.Regarding.Name)
		}
	}
	slices.Sort(out)
	return out
}

// causes reads the causes the "Preempted" Events for preemptor
// (namespace/name) carry.
func (e *env) causes(preemptor string) []reasons.Preemption {
	e.t.Helper()
	evs, err := e.c.Client.EventsV1().Events(ns).List(e.t.Context(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []reasons.Preemption
	for _, ev := range evs.Items {
		if ev.Reason != "Preempted" {
			continue
		}
		c, ok := reasons.ParsePreemption(ev.Note)
		if !ok {
			e.t.Errorf("Preempted event on %s: note %q is no cause", ev.Regarding.Name, ev.Note)
		}
		if c.Preemptor == preemptor {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		e.t.Errorf("no cause recorded for %s", preemptor)
	}
	return out
}

// gone waits until none of pods exists.
func (e *env) gone(pods ...string) {
	e.t.Helper()
	e.waitFor(strings.Join(pods, ", ")+" gone", func() bool {
		for _, p := range pods {
			if _, err := e.c.Client.CoreV1().Pods(ns).Get(e.t.Context(), p, metav1.GetOptions{}); err == nil {
				return false
			}
		}
		return true
	})
}

// Live preemption evicts whole jobs, choosing the ones that lose the fewest
// GPU-hours, as scoring's rule says and the simulator replays.
func TestLivePreemptionEvictsWholeJobs(t *testing.T) {
	set := schedplugins.NewSet()
	e := newEnvWith(t, gpuNodes("w", 2, nil), "", set)
	e.priorityClass("test-low", 0)
	e.priorityClass("test-mid", 10)
	e.priorityClass("test-high", 1000)
	e.setProfileWithTable(set, "whole", "name: whole\n"+orderDoc, 8, nil)

	// Two 5-GPU jobs, one per node, run for an hour; a young gang of 2 x 3
	// GPUs fills the rest, a member on each node. A 3-GPU pod at high
	// priority must evict the gang (6 GPUs x 10 s) rather than either old
	// job (5 GPUs x 1 h), and the whole gang: the member on the node it
	// does not take too.
	t.Run("a whole gang, never part of it", func(t *testing.T) {
		e.t = t
		e.pod("old-a", ours, 5, withPriority("test-low"))
		e.pod("old-b", ours, 5, withPriority("test-low"))
		e.waitBound("old-", 2)
		e.gang("young", ours, 2, 3, 0, withPriority("test-low"))
		if n := nodesOf(e.waitBound("young-", 2)); len(n) != 2 {
			t.Fatalf("the gang is on %v, want a member on each node", n)
		}
		e.ranFor(time.Hour, "old-a", "old-b")
		e.ranFor(10*time.Second, "young-0", "young-1")
		e.pod("urgent", ours, 3, withPriority("test-high"))
		e.waitBound("urgent", 1)
		e.gone("young-0", "young-1")
		if got := e.preempted("urgent", 2); !slices.Equal(got, []string{"young-0", "young-1"}) {
			t.Errorf("preempted for urgent: %v, want both gang members", got)
		}
		for _, c := range e.causes("default/urgent") {
			// 6 GPUs for 10 s (a second more if the stamp and the
			// preemption straddle one).
			if c.Job != "default/young" || c.Node == "" || c.Priority != 1000 || c.GPUHours < 0.0166 || c.GPUHours > 0.02 {
				t.Errorf("cause %+v, want job default/young losing 6 GPUs x 10 s", c)
			}
		}
		e.stillRunning("old-a")
		e.stillRunning("old-b")
		e.deletePods("")
	})

	// old (4 GPUs, an hour, lowest priority) and fresh (4 GPUs, a minute,
	// a higher priority) share a node; DefaultPreemption would evict the
	// lower priority, scoring's rule evicts what loses least: fresh.
	t.Run("fewest GPU-hours", func(t *testing.T) {
		e.t = t
		e.pod("big", ours, 8, withPriority("test-low"))
		e.waitBound("big", 1)
		e.pod("old", ours, 4, withPriority("test-low"))
		e.pod("fresh", ours, 4, withPriority("test-mid"))
		e.waitBound("old", 1)
		e.waitBound("fresh", 1)
		e.ranFor(2*time.Hour, "big")
		e.ranFor(time.Hour, "old")
		e.ranFor(time.Minute, "fresh")
		e.pod("urgent-cheap", ours, 4, withPriority("test-high"))
		e.waitBound("urgent-cheap", 1)
		e.gone("fresh")
		if got := e.preempted("urgent-cheap", 1); !slices.Equal(got, []string{"fresh"}) {
			t.Errorf("preempted for urgent-cheap: %v, want fresh alone", got)
		}
		p, err := e.c.Client.CoreV1().Pods(ns).Get(t.Context(), "urgent-cheap", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.NominatedNodeName == "" && p.Spec.NodeName == "" {
			t.Error("the preemptor was neither nominated nor bound")
		}
		e.stillRunning("old")
		e.stillRunning("big")
		e.deletePods("")
	})

	// A gang one of whose members is marked non-preemptible is never a
	// victim, however cheap: a lone pod that could only fit by evicting it
	// waits.
	t.Run("a non-preemptible gang member protects its gang", func(t *testing.T) {
		e.t = t
		e.gang("serve", ours, 2, 8, 0, withPriority("test-low"), func(p *corev1.Pod) {
			if strings.HasSuffix(p.Name, "-1") {
				p.Labels[podspec.LabelPreemptible] = "false"
			}
		})
		e.waitBound("serve-", 2)
		e.ranFor(time.Second, "serve-0", "serve-1")
		e.pod("urgent-serve", ours, 8, withPriority("test-high"))
		e.waitReason("urgent-serve", "no set of preemptible jobs")
		e.stillRunning("serve-0")
		e.stillRunning("serve-1")
		if got := e.preemptedNow("urgent-serve"); len(got) != 0 {
			t.Errorf("preempted for urgent-serve: %v, want none", got)
		}
		e.deletePods("")
	})
}
