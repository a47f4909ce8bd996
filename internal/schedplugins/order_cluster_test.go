package schedplugins_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/schedloop/schedloop/internal/schedplugins"
	"github.com/schedloop/schedloop/internal/scoring"
)

// Gangs are ordered as one entity by the live queue, declared either way
// (a Workload API gang waits gated at SchedloopGang's PreEnqueue after a
// failed pod-group cycle, so a freed node's event wakes it in the same
// pass as the lone pod, as it wakes a scheduler-plugins gang's pods):
// two gangs of 2×4 GPUs and a lone 8-GPU pod wait behind two full nodes
// under shortest predicted service; each freed node goes to the next job of
// the order scoring.CompareOrder gives their keys (run time from the
// published table × the job's 8 GPUs), whole, and to nothing else. They
// arrive long gang, lone pod, short gang: arrival order would start them in
// that order.
func TestGangsOrderedAsOneEntity(t *testing.T) {
	runs := map[string]float64{"long": 36000, "mid": 3600, "short": 60}
	var keys []scoring.QueueKey
	for i, name := range []string{"long", "mid", "short"} {
		k := scoring.QueueKey{Created: int64(i), Name: name,
			Service: scoring.PredictedService(time.Duration(runs[name]*float64(time.Second)), 8000)}
		if name != "mid" {
			k.Gang = ns + "/" + name
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b scoring.QueueKey) int {
		return scoring.CompareOrder(scoring.Params{Order: scoring.OrderShortestService}, 0, a, b)
	})
	var want []string
	for _, k := range keys {
		want = append(want, k.Name)
	}

	for _, api := range []string{"podgroup", "workload"} {
		t.Run(api, func(t *testing.T) {
			set := schedplugins.NewSet()
			e := newEnvWith(t, gpuNodes("n", 2, nil), "", set)
			e.setProfileWithTable(set, "ssf", "name: ssf\norder: shortest-service\n"+orderDoc, 8, runs)
			gang := func(name string) {
				if api == "workload" {
					e.workloadGang(name, ours, 2, 4)
				} else {
					e.gang(name, ours, 2, 4, 0)
				}
			}
			e.pod("blk-a", ours, 8)
			e.pod("blk-b", ours, 8)
			e.waitBound("blk-", 2)
			gang("long")
			e.pod("mid", ours, 8)
			gang("short")
			e.waitUnschedulable("long-0", "long-1", "mid", "short-0", "short-1")
			e.waitQuiet()
			var got []string
			for _, free := range []string{"blk-a", "blk-b", "" /* the first job started */} {
				if free == "" {
					free = got[0]
				}
				got = append(got, e.nextStarted(free, got))
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("started %v, want %v (scoring.CompareOrder under shortest-service)", got, want)
			}
		})
	}
}

// waitQuiet waits until the scheduler has made no attempt (of a pod or a
// pod group) for longer than its longest retry backoff (10 s), so every
// waiting job is out of backoff and a freed node goes to whichever the
// queue's order puts first. A gang is tried more often than a lone pod
// while it waits, so it leaves its backoff last.
func (e *env) waitQuiet() {
	e.t.Helper()
	const backoff = 10*time.Second + 500*time.Millisecond
	attempts := func() float64 {
		families, err := legacyregistry.DefaultGatherer.Gather()
		if err != nil {
			e.t.Fatal(err)
		}
		var n float64
		for _, f := range families {
			if f.GetName() == "scheduler_schedule_attempts_total" || f.GetName() == "scheduler_podgroup_schedule_attempts_total" {
				for _, m := range f.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n
	}
	last, since := attempts(), time.Now()
	e.waitFor("the scheduler's retries to settle", func() bool {
		if n := attempts(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) > backoff
	})
}

// nextStarted frees the node of the job named free (a pod, or a gang's
// members free-*) and returns the job that then starts: all of a gang's
// members, or a lone pod. Jobs in done have already started; no other job
// may start beside the one returned, as each fills the freed node.
func (e *env) nextStarted(free string, done []string) string {
	e.t.Helper()
	e.deletePods(free)
	jobOf := func(pod string) string {
		if i := strings.LastIndexByte(pod, '-'); i > 0 && pod != "mid" {
			return pod[:i]
		}
		return pod
	}
	var started string
	e.waitFor("a job to start on the node "+free+" held", func() bool {
		bound, _ := e.placement("")
		count := map[string]int{}
		for p := range bound {
			if j := jobOf(p); j != "blk" && !slices.Contains(done, j) {
				count[j]++
			}
		}
		for j, n := range count {
			if n == 2 || j == "mid" {
				started = j
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second) // anything starting beside it would show by now
	bound, _ := e.placement("")
	for p := range bound {
		if j := jobOf(p); j != "blk" && j != started && !slices.Contains(done, j) {
			e.t.Errorf("%s started beside %s on a node only one job fits", p, started)
		}
	}
	return started
}
