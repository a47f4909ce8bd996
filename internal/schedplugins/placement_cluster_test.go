package schedplugins_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/schedloop/schedloop/internal/trace"
)

// Racks r1 (NVLink domains r1a, r1b: 3 hosts each) and r2 (r2a: 4 hosts,
// r2b: 2 hosts); only r2a can hold four 8-GPU members.
func rackNodes() []trace.Node {
	layout := []struct{ rack, nvl string }{}
	for _, d := range []struct {
		rack, nvl string
		hosts     int
	}{{"r1", "r1a", 3}, {"r1", "r1b", 3}, {"r2", "r2a", 4}, {"r2", "r2b", 2}} {
		for range d.hosts {
			layout = append(layout, struct{ rack, nvl string }{d.rack, d.nvl})
		}
	}
	return gpuNodes("h", len(layout), func(i int) map[string]string {
		return map[string]string{trace.LabelSpine: "s1", trace.LabelRack: layout[i].rack, trace.LabelNVLinkDomain: layout[i].nvl}
	})
}

func TestGangLandsInOneNVLinkDomain(t *testing.T) {
	e := newEnv(t, rackNodes(), "")
	for _, api := range gangAPIs {
		train, strict := string(api)+"-train", string(api)+"-strict"
		e.gangAs(api, train, ours, 4, 8)
		bound := e.waitBound(train+"-", 4)
		want := []string{"h06", "h07", "h08", "h09"} // r2a
		if got := nodesOf(bound); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%s: gang of 4x8 GPUs on %v, want NVLink domain r2a %v", api, got, want)
		}

		// With r2a full, no NVLink domain holds four more: a required level
		// keeps the gang pending with a topology reason instead of spanning
		// domains.
		e.gangAs(api, strict, ours, 4, 8, annotated("schedloop.io/topology-required", trace.LabelNVLinkDomain))
		note := e.waitGangReason(api, strict, "topology: gang needs 32 GPUs within one "+trace.LabelNVLinkDomain+"; largest free "+trace.LabelNVLinkDomain+" has 24")
		t.Logf("%s, required level: %s", api, note)
		if b, _ := e.placement(strict + "-"); len(b) != 0 {
			t.Fatalf("%s: required-level gang bound %d members", api, len(b))
		}
		e.deletePods(strict + "-")
		e.deletePods(train + "-")
	}

	// The stock profile on the same workload, for the record.
	e.gang("stock", stock, 4, 8, 0)
	stockNodes := nodesOf(e.waitBound("stock-", 4))
	t.Logf("stock profile placed the 4x8 gang on %v", stockNodes)
}

// teamA16Profile limits queue team-a to 16 GPUs.
const teamA16Profile = `apiVersion: schedloop.io/v1
kind: SchedulingProfile
name: queues-v1
weights: {binpack: 1}
queues:
  team-a: {maxGPUs: 16}
`

func TestQueueLimitHoldsUnderBurst(t *testing.T) {
	e := newEnv(t, gpuNodes("n", 4, nil), teamA16Profile)
	for i := range 10 {
		e.pod("a-"+string(rune('0'+i)), ours, 4, inQueue("team-a"))
	}
	for i := range 4 {
		e.pod("free-"+string(rune('0'+i)), ours, 1)
	}
	e.waitBound("free-", 4)
	e.waitBound("a-", 4)
	bound, pending := e.placement("a-")
	var waiting string
	for i := range 10 {
		if name := "a-" + string(rune('0'+i)); bound[name] == "" {
			waiting = name
			break
		}
	}
	e.waitReason(waiting, "queue team-a at limit 16 GPUs")
	if bound, pending = e.placement("a-"); len(bound) != 4 || pending != 6 {
		t.Fatalf("queue team-a: %d bound, %d pending; want 4 (16 GPUs) and 6", len(bound), pending)
	}

	// Raising the limit is no cluster event, yet the waiting pods are
	// retried at once rather than at the scheduler's five-minute flush.
	e.setProfile(`apiVersion: schedloop.io/v1
kind: SchedulingProfile
name: queues-v2
weights: {binpack: 1}
queues:
  team-a: {maxGPUs: 24}
`)
	e.waitBound("a-", 6)
	if bound, pending = e.placement("a-"); len(bound) != 6 || pending != 4 {
		t.Fatalf("queue team-a at 24 GPUs: %d bound, %d pending; want 6 and 4", len(bound), pending)
	}
}

const spreadProfile = `apiVersion: schedloop.io/v1
kind: SchedulingProfile
name: spread-v1
weights: {spread: 1}
`

func TestProfileChangeFlipsPlacementWithoutRestart(t *testing.T) {
	e := newEnv(t, gpuNodes("n", 3, nil), spreadProfile)
	e.pod("p1", ours, 1)
	e.waitBound("p1", 1)
	e.pod("p2", ours, 1)
	e.waitBound("p2", 1)
	b, _ := e.placement("p")
	if b["p1"] != "n00" || b["p2"] != "n01" {
		t.Fatalf("spread: p1 on %s, p2 on %s; want n00, n01", b["p1"], b["p2"])
	}

	e.setProfile(`apiVersion: schedloop.io/v1
kind: SchedulingProfile
name: pack-v2
weights: {binpack: 1}
`)
	e.waitFor("pack-v2 active", func() bool { return metricHas(t, `schedloop_scheduler_profile_active_info{hash=`, `name="pack-v2"`) })
	e.pod("p3", ours, 1)
	if n := e.waitBound("p3", 1)["p3"]; n != "n00" {
		t.Fatalf("pack: p3 on %s, want n00 (spread would pick the empty n02)", n)
	}

	// A bad profile is refused with an Event naming the field; pack stays.
	e.setProfile(`apiVersion: schedloop.io/v1
kind: SchedulingProfile
name: broken-v3
weights: {spread: 1, warp: 3}
`)
	e.waitFor("ProfileRejected event naming weights.warp", func() bool {
		evs, err := e.c.Client.EventsV1().Events("kube-system").List(t.Context(), metav1ListAll)
		if err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if ev.Reason == "ProfileRejected" && strings.Contains(ev.Note, "weights.warp") {
				t.Logf("event: %s", ev.Note)
				return true
			}
		}
		return false
	})
	if !metricHas(t, `schedloop_scheduler_profile_active_info{hash=`, `name="pack-v2"`) {
		t.Fatal("the refused profile replaced the active one")
	}
	e.pod("p4", ours, 1)
	if n := e.waitBound("p4", 1)["p4"]; n != "n00" {
		t.Fatalf("after a refused profile: p4 on %s, want n00 (pack-v2 still active)", n)
	}
}

// metricHas reports whether a line of the scheduler's /metrics exposition
// starts with prefix and contains every part.
func metricHas(t *testing.T, prefix string, parts ...string) bool {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "schedloop_") {
			continue
		}
		for _, m := range f.GetMetric() {
			b.WriteString(f.GetName() + "{")
			for _, l := range m.GetLabel() {
				b.WriteString(l.GetName() + `="` + l.GetValue() + `",`)
			}
			b.WriteString("} ")
			if m.GetGauge() != nil {
				b.WriteString(formatFloat(m.GetGauge().GetValue()))
			}
			b.WriteString("\n")
		}
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		ok := strings.HasSuffix(line, " 1")
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// A gang is confined to its planned domain by preference, not requirement.
// When the domain's nodes refuse it for a reason the plan cannot see (here a
// taint), the gang is unconfined and lands elsewhere instead of retrying the
// same domain forever.
func TestGangLeavesADomainThatRefusesIt(t *testing.T) {
	e := newEnv(t, rackNodes(), "")
	ctx := t.Context()
	for _, name := range []string{"h06", "h07", "h08", "h09"} { // r2a, the only domain that holds the gang
		n, err := e.c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule})
		if _, err := e.c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, api := range gangAPIs {
		name := string(api) + "-train"
		e.gangAs(api, name, ours, 4, 8)
		bound := e.waitBound(name+"-", 4)
		for pod, node := range bound {
			if node >= "h06" && node <= "h09" {
				t.Errorf("%s: %s bound to tainted node %s", api, pod, node)
			}
		}
		t.Logf("%s: gang placed on %v", api, nodesOf(bound))
		e.deletePods(name + "-")
	}
}
