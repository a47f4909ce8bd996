package schedplugins_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/schedplugins"
)

// setProfileWithTable publishes doc with a predictor table in which the
// job "default/<name>" asking for gpus GPUs runs for runs[name] seconds,
// and waits until the scheduler has loaded it.
func (e *env) setProfileWithTable(set *schedplugins.Set, name, doc string, gpus int, runs map[string]float64) {
	e.t.Helper()
	tb := predict.Table{HalfLifeSeconds: 3600, MinSamples: 1, MaxEntries: 1000, DefaultSeconds: 3600}
	for job, sec := range runs {
		tb.Entries = append(tb.Entries, predict.TableEntry{Level: "namespace/queue/name/gpus",
			Key: ns + "//" + job + "/" + formatFloat(float64(gpus)), Seconds: sec, Weight: 1, Samples: 1})
	}
	b, err := json.Marshal(tb)
	if err != nil {
		e.t.Fatal(err)
	}
	cms := e.c.Client.CoreV1().ConfigMaps("kube-system")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: profile.DefaultConfigMapName},
		Data: map[string]string{profile.ConfigMapKey: doc, profile.PredictorConfigMapKey: string(b)}}
	if _, err := cms.Update(e.t.Context(), cm, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		if _, err = cms.Create(e.t.Context(), cm, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	} else if err != nil {
		e.t.Fatal(err)
	}
	e.waitFor("profile "+name+" loaded", func() bool { return set.Profile.Load().Doc.Name == name })
}

// waitUnschedulable waits until each named pod has been tried and found no
// node, then for two of the scheduler's retry backoffs (1 s, 2 s) to pass, so
// freeing a node moves them all into the active queue at once and the
// queue's order alone picks who goes first.
func (e *env) waitUnschedulable(names ...string) {
	e.t.Helper()
	e.waitFor("pods tried and unschedulable", func() bool {
		for _, n := range names {
			p, err := e.c.Client.CoreV1().Pods(ns).Get(e.t.Context(), n, metav1.GetOptions{})
			if err != nil {
				return false
			}
			tried := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse
			})
			if !tried {
				return false
			}
		}
		return true
	})
	time.Sleep(2500 * time.Millisecond)
}

// first frees blocker's node and returns the one of candidates bound to
// it; the rest must still wait.
func (e *env) first(blocker string, candidates ...string) string {
	e.t.Helper()
	e.deletePods(blocker)
	var got string
	e.waitFor("one of "+formatStrings(candidates)+" bound", func() bool {
		bound, _ := e.placement("")
		for _, c := range candidates {
			if bound[c] != "" {
				got = c
				return true
			}
		}
		return false
	})
	// Each candidate takes a whole node: nobody else can have started.
	bound, _ := e.placement("")
	for _, c := range candidates {
		if c != got && bound[c] != "" {
			e.t.Errorf("%s and %s both started on a node only one fits", got, c)
		}
	}
	return got
}

func formatStrings(s []string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

const orderDoc = "apiVersion: schedloop.io/v1\nkind: SchedulingProfile\nweights: {bestfit: 1}\n"

// The live queue orders by the profile's order policy with the run times
// of the predictor table published beside it: shortest predicted service
// first; a job waiting past the starvation bound first; under fair share,
// the queue whose pods held fewer GPUs lately first.
func TestLiveOrderPolicies(t *testing.T) {
	set := schedplugins.NewSet()
	e := newEnvWith(t, gpuNodes("n", 2, nil), "", set)
	runs := map[string]float64{"long": 36000, "mid": 3600, "short": 60}

	t.Run("shortest predicted service first", func(t *testing.T) {
		e.t = t
		e.setProfileWithTable(set, "ssf", "name: ssf\norder: shortest-service\n"+orderDoc, 8, runs)
		e.pod("blk-a", ours, 8)
		e.pod("blk-b", ours, 8)
		e.waitBound("blk-", 2)
		for _, n := range []string{"long", "mid", "short"} {
			e.pod(n, ours, 8)
		}
		e.waitUnschedulable("long", "mid", "short")
		if got := e.first("blk-a", "long", "mid", "short"); got != "short" {
			t.Errorf("%s started first; the shortest predicted job is short (arrival order would start long)", got)
		}
		e.deletePods("")
	})

	t.Run("starvation bound lifts the oldest", func(t *testing.T) {
		e.t = t
		e.setProfileWithTable(set, "starve", "name: starve\norder: shortest-service\nstarvationBoundSeconds: 4\n"+orderDoc, 8, runs)
		e.pod("blk-a", ours, 8)
		e.pod("blk-b", ours, 8)
		e.waitBound("blk-", 2)
		e.pod("long", ours, 8)
		// long waits past the bound; short arrives later and has not.
		time.Sleep(4 * time.Second)
		e.pod("short", ours, 8)
		e.waitUnschedulable("long", "short")
		if got := e.first("blk-a", "long", "short"); got != "long" {
			t.Errorf("%s started first; long waited past the starvation bound", got)
		}
		e.deletePods("")
	})

	t.Run("fair share favours the queue served least", func(t *testing.T) {
		e.t = t
		e.setProfileWithTable(set, "fair", "name: fair\norder: fair-share\n"+orderDoc, 8, runs)
		// Queue busy holds a node throughout; queue idle holds nothing.
		e.pod("busy-run", ours, 8, inQueue("busy"))
		e.pod("blk-a", ours, 8)
		e.waitBound("", 2)
		e.pod("busy-wait", ours, 8, inQueue("busy"))
		e.pod("idle-wait", ours, 8, inQueue("idle"))
		e.waitUnschedulable("busy-wait", "idle-wait")
		if got := e.first("blk-a", "busy-wait", "idle-wait"); got != "idle-wait" {
			t.Errorf("%s started first; queue idle received less service than busy (arrival order would start busy-wait)", got)
		}
		e.deletePods("")
	})
}

func withPriority(class string) podOpt {
	return func(p *corev1.Pod) { p.Spec.PriorityClassName = class }
}

func labelled(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Labels[k] = v }
}

func (e *env) priorityClass(name string, value int32) {
	e.t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if err := harness.CreatePriorityClass(e.t.Context(), e.c.Client, ns, pc); err != nil {
		e.t.Fatal(err)
	}
}

// waitRunning waits until pod runs on a node.
func (e *env) waitRunning(name string) {
	e.t.Helper()
	e.waitFor(name+" running", func() bool {
		p, err := e.c.Client.CoreV1().Pods(ns).Get(e.t.Context(), name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && p.Status.StartTime != nil
	})
}

// stillRunning fails the test unless pod runs, not being deleted.
func (e *env) stillRunning(name string) {
	e.t.Helper()
	p, err := e.c.Client.CoreV1().Pods(ns).Get(e.t.Context(), name, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		e.t.Errorf("%s was preempted (err %v)", name, err)
	}
}

// Live preemption offers no victim the profile's rule protects: a pod
// labelled schedloop.io/preemptible: "false", or one younger than
// preemption.minRunTimeSeconds; an unprotected lower-priority pod is still
// evicted for a higher-priority one.
func TestLivePreemptionHonoursTheVictimRule(t *testing.T) {
	set := schedplugins.NewSet()
	e := newEnvWith(t, gpuNodes("p", 1, nil), "", set)
	e.priorityClass("test-low", 0)
	e.priorityClass("test-high", 1000)

	t.Run("non-preemptible", func(t *testing.T) {
		e.t = t
		e.setProfileWithTable(set, "np", "name: np\n"+orderDoc, 8, nil)
		e.pod("serve", ours, 8, withPriority("test-low"), labelled(podspec.LabelPreemptible, "false"))
		e.waitRunning("serve")
		// Names differ between cases: a case must not read an earlier one's events.
		e.pod("urgent-np", ours, 8, withPriority("test-high"))
		e.waitReason("urgent-np", "no set of preemptible jobs")
		e.stillRunning("serve")
		e.deletePods("")
	})

	t.Run("preemptible is evicted", func(t *testing.T) {
		e.t = t
		e.pod("train", ours, 8, withPriority("test-low"))
		e.waitRunning("train")
		e.pod("urgent-any", ours, 8, withPriority("test-high"))
		e.waitBound("urgent-any", 1)
		e.deletePods("")
	})

	t.Run("younger than the minimum run time", func(t *testing.T) {
		e.t = t
		e.setProfileWithTable(set, "minrun", "name: minrun\npreemption: {minRunTimeSeconds: 3600}\n"+orderDoc, 8, nil)
		e.pod("young", ours, 8, withPriority("test-low"))
		e.waitRunning("young")
		e.pod("urgent-young", ours, 8, withPriority("test-high"))
		e.waitReason("urgent-young", "no set of preemptible jobs")
		e.stillRunning("young")
		e.deletePods("")
	})
}
