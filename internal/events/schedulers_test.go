package events

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/schedloop/schedloop"
)

// corpusLine is one message of testdata/schedulers.txt with the section it
// sits in.
type corpusLine struct {
	section string
	known   bool
	msg     string
}

func readSchedulerCorpus(t testing.TB) []corpusLine {
	in, err := os.ReadFile(filepath.Join("testdata", "schedulers.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out []corpusLine
	section, known := "", false
	sc := bufio.NewScanner(bytes.NewReader(in))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# known:"):
			section, known = strings.TrimSpace(line[len("# known:"):]), true
			continue
		case strings.HasPrefix(line, "# unknown:"):
			section, known = "unknown", false
			continue
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
			continue
		}
		if section == "" {
			t.Fatalf("message before any # known:/# unknown: section: %q", line)
		}
		if strings.HasPrefix(line, `"`) {
			u, err := strconv.Unquote(line)
			if err != nil {
				t.Fatalf("quoted line %q: %v", line, err)
			}
			line = u
		}
		out = append(out, corpusLine{section: section, known: known, msg: line})
	}
	return out
}

// TestSchedulerCorpus files every real message: those in a known section
// under a specific category, those in the unknown section under other, and
// none as an error. It prints the share of the whole corpus (kube-scheduler's
// lines and the other schedulers') filed under a specific category.
func TestSchedulerCorpus(t *testing.T) {
	lines := readSchedulerCorpus(t)
	perSection := map[string][2]int{}
	var order []string
	for _, l := range lines {
		f := ParseFailedScheduling(l.msg)
		specific := f.Category != schedloop.WaitOther
		if l.known && !specific {
			t.Errorf("[%s] %q filed under other, want a specific category", l.section, l.msg)
		}
		if !l.known && specific {
			t.Errorf("[%s] %q filed under %s, want other", l.section, l.msg, f.Category)
		}
		c, seen := perSection[l.section]
		if !seen {
			order = append(order, l.section)
		}
		c[1]++
		if specific {
			c[0]++
		}
		perSection[l.section] = c
	}
	for _, s := range order {
		c := perSection[s]
		t.Logf("%-40s %2d of %2d filed under a specific category", s, c[0], c[1])
	}

	// The share over every real message the tests hold, kube-scheduler's too.
	all, specific := 0, 0
	for _, l := range lines {
		all++
		if ParseFailedScheduling(l.msg).Category != schedloop.WaitOther {
			specific++
		}
	}
	kube, err := os.ReadFile(filepath.Join("testdata", "failedscheduling.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// A note starting "# Not scheduler text" marks the lines up to the next
	// note as malformed input, not real text: they stay out of the share.
	synthetic, inNote, left := false, false, 0
	for _, line := range strings.Split(string(kube), "\n") {
		if strings.HasPrefix(line, "#") {
			if !inNote {
				synthetic = false
			}
			inNote = true
			synthetic = synthetic || strings.HasPrefix(line, "# Not scheduler text")
			continue
		}
		inNote = false
		if strings.TrimSpace(line) == "" {
			continue
		}
		if synthetic {
			left++
			continue
		}
		all++
		if ParseFailedScheduling(line).Category != schedloop.WaitOther {
			specific++
		}
	}
	t.Logf("corpus: %d of %d real messages (%.1f%%) filed under a specific category, %d under other; %d malformed inputs left out",
		specific, all, 100*float64(specific)/float64(all), all-specific, left)
}

func TestGoldenSchedulers(t *testing.T) {
	var results []goldenResult
	for _, l := range readSchedulerCorpus(t) {
		results = append(results, golden(ParseFailedScheduling(l.msg)))
	}
	compareGolden(t, results, "schedulers.golden.json", "TestGoldenSchedulers")
}

func TestOtherSchedulerCategories(t *testing.T) {
	for _, tt := range []struct {
		msg  string
		want schedloop.WaitCategory
	}{
		{"1/0 tasks in gang unschedulable: pod group is not ready, 1 minAvailable.", schedloop.WaitGangIncomplete},
		{"6/6 tasks in gang unschedulable: pod group is not ready, 6 Pending, 6 minAvailable; Pending: 6 Unschedulable. Origin reason is w-0: 0/3 nodes are unavailable: 3 Insufficient nvidia.com/gpu.", schedloop.WaitInsufficientGPU},
		{"0/3 nodes are unavailable: 3 node(s) resource fit failed.", schedloop.WaitInsufficientCPU},
		{"queue resource quota insufficient", schedloop.WaitQueueLimit},
		{"Unable to schedule podgroup: 2 node-group(s) didn't have enough resources: GPUs.", schedloop.WaitTopology},
		{"no nodes with enough resources were found: 3 node(s) didn't have enough resources: GPUs.", schedloop.WaitInsufficientGPU},
		{"Request 'a' does not fit in queue 'root.q' (requested map[], available map[])", schedloop.WaitQueueLimit},
		{"couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed", schedloop.WaitQuota},
		{"0/4 nodes are available: 4 node(s) didn't find available persistent volumes to bind.", schedloop.WaitVolume},
		{"couldn't assign flavors to pod set main: untolerated taint {k v NoSchedule <nil>} in flavor spot, flavor h100 doesn't match node affinity", schedloop.WaitTaintAffinity},
		{"couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor on-demand, 5 more needed, untolerated taint {k v NoSchedule <nil>} in flavor spot", schedloop.WaitQuota},
		{"Admission is gated by: example.com/controller1", schedloop.WaitQuota},
		{"ClusterQueue cq is terminating or missing", schedloop.WaitQuota},
		{"Preempted to accommodate a workload (UID: a, JobUID: b) due to reclamation within the cohort; preemptor path: /c/q1; preemptee path: /c/q2", schedloop.WaitPreemption},
	} {
		if got := ParseFailedScheduling(tt.msg); got.Category != tt.want || !got.Parsed || got.Message != tt.msg {
			t.Errorf("%q: category %s parsed %v, want %s parsed", tt.msg, got.Category, got.Parsed, tt.want)
		}
	}
	mismatch := ParseFailedScheduling("couldn't assign flavors to pod set main: untolerated taint {k v NoSchedule <nil>} in flavor spot, flavor h100 doesn't match node affinity")
	if _, ok := mismatch.Reasons["flavor spot does not admit the pods' tolerations or node affinity"]; !ok || len(mismatch.Reasons) != 2 {
		t.Errorf("Kueue flavour mismatch reasons = %v, want one per flavour", mismatch.Reasons)
	}
	f := ParseFailedScheduling("couldn't assign flavors to pod set main: insufficient quota for cpu in flavor spot, previously considered podsets requests (0) + current podset request (20) > maximum capacity (10), insufficient unused quota for nvidia.com/gpu in flavor on-demand, 20 more needed")
	want := map[string]int{"insufficient quota for cpu in flavor spot": 0, "insufficient quota for nvidia.com/gpu in flavor on-demand": 0}
	if len(f.Reasons) != len(want) {
		t.Fatalf("Kueue reasons = %v, want %v", f.Reasons, want)
	}
	for r := range want {
		if _, ok := f.Reasons[r]; !ok {
			t.Errorf("Kueue reasons = %v, missing %q", f.Reasons, r)
		}
	}
}

func FuzzParseOtherSchedulers(f *testing.F) {
	for _, l := range readSchedulerCorpus(f) {
		f.Add(l.msg)
	}
	f.Add("1/1 tasks in gang unschedulable: 1/1 tasks in gang unschedulable: pod group is not ready. Origin reason is x: ")
	f.Add("Unschedulable request 'a': (x); ")
	f.Add("no nodes with enough resources were found: . \n. \n99999999999999999999 a.")
	f.Fuzz(checkParseInvariants)
}

// TestUnschedulableEventIsAnAttempt: KAI reports a pod's failed attempt as an
// Unschedulable event; it counts like kube-scheduler's FailedScheduling.
func TestUnschedulableEventIsAnAttempt(t *testing.T) {
	e := schedloop.Event{UID: "ev-2", InvolvedKind: "Pod", InvolvedUID: "pod-2", Reason: "Unschedulable", Count: 1,
		Message: "Non-preemptible workload is over quota. Workload requested 1 GPUs, but prod quota is 1 GPUs, while 1 GPUs are already allocated for non-preemptible pods. Use a preemptible workload to go over quota."}
	got := attempts(e, NewParser())
	if len(got) != 1 || got[0].Category != schedloop.WaitQueueLimit || got[0].Result != schedloop.AttemptUnschedulable {
		t.Errorf("attempts = %+v, want one unschedulable queue_limit attempt", got)
	}
}
