package kueue_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kueueapi "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/schedloop/schedloop/internal/kueuereplay"
	"github.com/schedloop/schedloop/internal/podspec"
)

// flavorQueues adds ResourceFlavor spot (no node labels: any node) and, in
// cohort "lab", team-c and team-d whose CPU and GPUs come from h100 then
// spot: team-c owns 8 h100 GPUs and no spot, team-d no h100 and 16 spot;
// each lends all it owns. team-c keeps Kueue's default flavour
// fungibility; team-d tries the next flavour where it would borrow.
func (e *env) flavorQueues() {
	e.create(&kueueapi.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "spot"}})
	q := func(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
	for _, team := range []struct {
		name       string
		h100, spot int64
		ff         *kueueapi.FlavorFungibility
	}{
		{"team-c", 8, 0, nil},
		{"team-d", 0, 16, &kueueapi.FlavorFungibility{WhenCanBorrow: kueueapi.TryNextFlavor}},
	} {
		flavor := func(name string, gpus int64) kueueapi.FlavorQuotas {
			return kueueapi.FlavorQuotas{Name: kueueapi.ResourceFlavorReference(name), Resources: []kueueapi.ResourceQuota{
				{Name: corev1.ResourceCPU, NominalQuota: q(64)}, {Name: podspec.ResourceGPU, NominalQuota: q(gpus)}}}
		}
		e.create(&kueueapi.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: team.name},
			Spec: kueueapi.ClusterQueueSpec{
				CohortName:        "lab",
				NamespaceSelector: &metav1.LabelSelector{},
				ResourceGroups: []kueueapi.ResourceGroup{{
					CoveredResources: []corev1.ResourceName{corev1.ResourceCPU, podspec.ResourceGPU},
					Flavors:          []kueueapi.FlavorQuotas{flavor("h100", team.h100), flavor("spot", team.spot)},
				}},
				FlavorFungibility: team.ff,
				Preemption:        &kueueapi.ClusterQueuePreemption{ReclaimWithinCohort: kueueapi.PreemptionPolicyAny},
			},
		})
		e.create(&kueueapi.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: team.name},
			Spec:       kueueapi.LocalQueueSpec{ClusterQueue: kueueapi.ClusterQueueReference(team.name)},
		})
	}
}

// admittedOn waits for Kueue to reserve quota for the workload and returns
// the GPU flavour it assigned.
func (e *env) admittedOn(name string) string {
	e.t.Helper()
	var flavor string
	e.waitFor(name+" admitted", func() bool {
		qr := e.condition(name, kueueapi.WorkloadQuotaReserved)
		if qr == nil || qr.Status != metav1.ConditionTrue {
			return false
		}
		wl := e.workload(name)
		if wl.Status.Admission == nil || len(wl.Status.Admission.PodSetAssignments) == 0 {
			return false
		}
		flavor = string(wl.Status.Admission.PodSetAssignments[0].Flavors[podspec.ResourceGPU])
		return true
	})
	return flavor
}

// TestKueueFlavorFallThroughMatchesReplay: with two flavours per
// ClusterQueue, live Kueue picks each workload's flavour and the replay,
// fed the same objects, picks the same one in the same order. team-d's d1
// passes over the h100 it could borrow for its own spot (TryNextFlavor);
// team-c's c1 fits its own h100; c2 finds h100 full and falls through to
// spot, borrowing it; team-d's d2 finds h100 full and reclaims its spot
// from c2, which waits: no flavour has room left for it.
func TestKueueFlavorFallThroughMatchesReplay(t *testing.T) {
	e := newEnv(t)
	e.flavorQueues()
	db, stopCollecting := e.collect()
	live := map[string]string{}
	for _, s := range []struct{ name, queue string }{{"d1", "team-d"}, {"c1", "team-c"}, {"c2", "team-c"}, {"d2", "team-d"}} {
		e.nextSecond()
		e.gang(s.name, s.queue, 1, nil)
		live[s.name] = e.admittedOn(s.name)
	}
	e.waitFor("c2 requeued, waiting for quota", func() bool {
		qr := e.condition("c2", kueueapi.WorkloadQuotaReserved)
		pre := e.condition("c2", kueueapi.WorkloadPreempted)
		return qr != nil && qr.Status == metav1.ConditionFalse && pre != nil && pre.Status == metav1.ConditionTrue
	})
	want := map[string]string{"d1": "spot", "c1": "h100", "c2": "spot", "d2": "spot"}
	for name, f := range want {
		if live[name] != f {
			t.Errorf("live Kueue gave %s %s GPUs, want %s (all: %v)", name, live[name], f, live)
		}
	}
	if d2 := e.workload("d2"); d2.Status.Admission == nil {
		t.Fatalf("d2 lost its admission")
	}
	stopCollecting()
	stored, err := db.KueueWorkloads(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	liveSteps := liveOrder(stored)
	for i, s := range liveSteps {
		if name, ok := strings.CutPrefix(s, "admit "); ok {
			liveSteps[i] += " on " + live[name]
		}
	}

	cohort, workloads, _ := e.replayInput()
	res, err := kueuereplay.Replay(cohort, workloads, true)
	if err != nil {
		t.Fatal(err)
	}
	var replayed []string
	for _, ev := range res.Events {
		if ev.At.After(time.Now()) {
			break
		}
		_, name, _ := strings.Cut(ev.Key, "/")
		switch ev.Kind {
		case kueuereplay.Admitted:
			replayed = append(replayed, "admit "+name+" on "+ev.Flavors[string(podspec.ResourceGPU)])
		case kueuereplay.Evicted:
			replayed = append(replayed, "evict "+name)
		}
	}
	t.Logf("live:     %v", liveSteps)
	t.Logf("replayed: %v", replayed)
	if !slices.Equal(liveSteps, replayed) {
		t.Errorf("replayed admissions %v, live %v", replayed, liveSteps)
	}
	if pre := apimeta.FindStatusCondition(e.workload("c2").Status.Conditions, kueueapi.WorkloadPreempted); pre != nil {
		t.Logf("c2 preempted: %s: %s", pre.Reason, pre.Message)
	}
}
