package player

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	corev1 "k8s.io/api/core/v1"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/podgroup"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/trace"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestKubeName(t *testing.T) {
	for in, want := range map[string]string{
		"openb-pod-0001": "openb-pod-0001",
		"Train_A 7":      "train-a-7",
		"--x--":          "x",
	} {
		if got := KubeName(in); got != want {
			t.Errorf("KubeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNewRejectsNameClashes(t *testing.T) {
	clock, _ := harness.NewClock(1)
	jobs := []trace.Job{
		{Name: "A", Members: 1, Outcome: trace.Succeeded},
		{Name: "a", Members: 1, Outcome: trace.Succeeded},
	}
	if _, err := New(nil, nil, jobs, Options{Clock: clock}); err == nil {
		t.Fatal("two jobs with one Kubernetes name accepted")
	}
}

// TestPodSpecGolden pins the pod a gang member becomes: labels, annotations
// the pod runner reads, GPU request, priority class and GPU-model affinity.
func TestPodSpecGolden(t *testing.T) {
	clock, _ := harness.NewClock(1)
	j := trace.Job{Name: "train-a", Arrival: time.Minute, Duration: 20 * time.Minute, Members: 4, GPUs: 8,
		CPUMilli: 8000, MemoryMiB: 65536, GPUModels: []string{"NVIDIA-H100-80GB-HBM3"}, Priority: 100,
		Queue: "research", Util: 0.9, Outcome: trace.Succeeded}
	p, err := New(nil, nil, []trace.Job{j}, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(p.pod("train-a", 2, j), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	const golden = "testdata/gang-member.golden"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("pod differs from %s:\n%s", golden, got)
	}
}

// TestGangDeclaration checks which jobs become gangs under each API: a job
// of one pod is a plain pod (no group object, label or schedulingGroup), as
// the simulator replays it; a job of more pods names its group the API's
// way. Declare makes no API call for a lone pod (the player has no clients
// here).
func TestGangDeclaration(t *testing.T) {
	clock, _ := harness.NewClock(1)
	for _, tc := range []struct {
		api     podgroup.API
		members int
		label   bool // the scheduler-plugins pod-group label
		sgroup  bool // spec.schedulingGroup
	}{
		{podgroup.APIPodGroup, 1, false, false},
		{podgroup.APIWorkload, 1, false, false},
		{podgroup.APIPodGroup, 2, true, false},
		{podgroup.APIWorkload, 2, false, true},
	} {
		j := trace.Job{Name: "job", Members: tc.members, GPUs: 1, Priority: 10, Outcome: trace.Succeeded}
		p, err := New(nil, nil, []trace.Job{j}, Options{Clock: clock, GangAPI: tc.api})
		if err != nil {
			t.Fatal(err)
		}
		pod := p.Pod("job", 0, j)
		_, label := pod.Labels[podgroup.LabelPodGroup]
		if label != tc.label || (pod.Spec.SchedulingGroup != nil) != tc.sgroup {
			t.Errorf("%s, %d members: pod-group label %v, schedulingGroup %v; want %v, %v",
				tc.api, tc.members, label, pod.Spec.SchedulingGroup != nil, tc.label, tc.sgroup)
		}
		if _, gangKey, isGang := podspec.GangKey(pod); isGang != (tc.members > 1) || (isGang && gangKey != "job") {
			t.Errorf("%s, %d members: podspec.GangKey reads gang %v (%q)", tc.api, tc.members, isGang, gangKey)
		}
		if tc.members == 1 {
			if err := p.Declare(t.Context(), "job", j); err != nil {
				t.Errorf("%s: Declare of a lone pod: %v", tc.api, err)
			}
		}
	}
}

// TestMIGJobPods pins how a member asks for MIG instances: as the device
// plugin's nvidia.com/mig-<profile> resources, limits equal to requests,
// or, through claims, as one claim per profile of NVIDIA's MIG class, its
// profile picked by the attribute the driver publishes, with the GPUs
// through the GPU class beside it.
func TestMIGJobPods(t *testing.T) {
	clock, _ := harness.NewClock(1)
	j := trace.Job{Name: "infer", Members: 1, GPUs: 1, Outcome: trace.Succeeded,
		MIG: map[string]int{"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1}}
	plugin, err := New(nil, nil, []trace.Job{j}, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	res := plugin.Pod("infer", 0, j).Spec.Containers[0].Resources
	for name, want := range map[corev1.ResourceName]int64{"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1} {
		if q := res.Limits[name]; q.Value() != want {
			t.Errorf("device plugin: limit %s = %v, want %d (limits %v)", name, q.String(), want, res.Limits)
		}
		if q := res.Requests[name]; q.Value() != want {
			t.Errorf("device plugin: request %s = %v, want %d", name, q.String(), want)
		}
	}

	claims, err := New(nil, nil, []trace.Job{j}, Options{Clock: clock, GPUClaims: true})
	if err != nil {
		t.Fatal(err)
	}
	pod := claims.Pod("infer", 0, j)
	for name := range pod.Spec.Containers[0].Resources.Limits {
		if name == "nvidia.com/gpu" || strings.HasPrefix(string(name), "nvidia.com/mig-") {
			t.Errorf("through claims: the pod still asks for %s as an extended resource", name)
		}
	}
	var got []string
	for _, c := range pod.Spec.ResourceClaims {
		got = append(got, c.Name+"="+*c.ResourceClaimTemplateName)
	}
	want := []string{"gpus=schedloop-gpus-1", "mig-0=schedloop-mig-1g10gb-2", "mig-1=schedloop-mig-3g40gb-1"}
	if !slices.Equal(got, want) || len(pod.Spec.Containers[0].Resources.Claims) != 3 {
		t.Errorf("through claims: pod claims %v (container %v), want %v", got, pod.Spec.Containers[0].Resources.Claims, want)
	}
	tpls := claims.claimTemplates(j)
	sel := tpls[2].tpl.Spec.Spec.Devices.Requests[0].Exactly
	if sel.DeviceClassName != "mig.nvidia.com" || sel.Count != 1 || len(sel.Selectors) != 1 ||
		sel.Selectors[0].CEL.Expression != `device.attributes["gpu.nvidia.com"].profile == "3g.40gb"` {
		t.Errorf("3g.40gb claim template asks %+v", sel)
	}
}

// A member's replacement pods are named apart from its first and from
// every other member's, and the player reads the member back from each.
func TestMemberPodNames(t *testing.T) {
	seen := map[string]bool{}
	for m := range 12 {
		for k := range 3 {
			name := MemberPodName("job-1", m, k)
			if seen[name] {
				t.Fatalf("pod name %s made twice", name)
			}
			seen[name] = true
			if got := memberOf("job-1", name); got != m {
				t.Errorf("memberOf(%s) = %d, want %d", name, got, m)
			}
		}
	}
	for _, name := range []string{"job-1", "job-1-x", "other-0", "job-1--1"} {
		if got := memberOf("job-1", name); got != -1 {
			t.Errorf("memberOf(%s) = %d, want -1", name, got)
		}
	}
}

// A lone job's pods carry the Job controller's labels, so the collector
// keeps one job across an evicted pod and its replacement; a gang's do
// not (its group is its job).
func TestLoneJobCarriesJobLabels(t *testing.T) {
	clock, _ := harness.NewClock(1)
	lone := trace.Job{Name: "lone", Members: 1, GPUs: 1, Outcome: trace.Succeeded}
	g := trace.Job{Name: "gang", Members: 2, GPUs: 1, Outcome: trace.Succeeded}
	p, err := New(nil, nil, []trace.Job{lone, g}, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	first, again := p.Pod("lone", 0, lone), p.Pod("lone", 0, lone)
	again.Name = MemberPodName("lone", 0, 1)
	again.UID = "other"
	uid, name := podspec.LoneJob(first)
	if uid == "" || name != "lone" {
		t.Fatalf("lone pod reads as job %q %q, want the Job's UID and name lone", uid, name)
	}
	if u, n := podspec.LoneJob(again); u != uid || n != name {
		t.Errorf("replacement reads as job %q %q, want %q %q", u, n, uid, name)
	}
	if _, ok := p.Pod("gang", 0, g).Labels[batchv1.ControllerUidLabel]; ok {
		t.Error("a gang member carries the Job controller's UID label")
	}
}
