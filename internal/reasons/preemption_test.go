package reasons

import (
	"strings"
	"testing"
)

func TestParsePreemption(t *testing.T) {
	tests := []struct {
		in   string
		want Preemption
		ok   bool
	}{
		{"Preempted by pod default/urgent (priority 1000) on node w00; job default/young loses 0.0167 GPU-hours",
			Preemption{Preemptor: "default/urgent", Priority: 1000, Node: "w00", Job: "default/young", GPUHours: 0.0167}, true},
		{"Preempted by pod ml/serve-7 (priority -5) on node gpu-a.example; job ml/train-0 loses 12 GPU-hours",
			Preemption{Preemptor: "ml/serve-7", Priority: -5, Node: "gpu-a.example", Job: "ml/train-0", GPUHours: 12}, true},
		// kube-scheduler's DefaultPreemption note names the preemptor by UID only.
		{"Preempted by pod 82b8c712-815c-4664-8fec-6f55cdcd4eb4 on node w00", Preemption{}, false},
		{"Preempted by pod default/urgent (priority 99999999999) on node w00; job default/young loses 1 GPU-hours", Preemption{}, false},
		{"Preempted by pod default/urgent (priority 1) on node w00; job young loses 1 GPU-hours", Preemption{}, false},
		{"", Preemption{}, false},
	}
	for _, tc := range tests {
		got, ok := ParsePreemption(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParsePreemption(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestPreemptionRoundTrip(t *testing.T) {
	p := Preemption{Preemptor: "a/b", Priority: 7, Node: "n1", Job: "a/g", GPUHours: 1.5}
	got, ok := ParsePreemption(p.String())
	if !ok || got != p {
		t.Errorf("round trip of %q: %+v, %v", p.String(), got, ok)
	}
	if strings.Contains(p.String(), ", ") {
		t.Errorf("%q holds \", \", which the FailedScheduling parser splits on", p.String())
	}
}

func FuzzParsePreemption(f *testing.F) {
	f.Add("Preempted by pod default/urgent (priority 1000) on node w00; job default/young loses 0.0167 GPU-hours")
	f.Add("Preempted by pod x on node y")
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := ParsePreemption(s)
		if !ok {
			return
		}
		again, ok := ParsePreemption(p.String())
		if !ok || again.Preemptor != p.Preemptor || again.Node != p.Node || again.Job != p.Job || again.Priority != p.Priority {
			t.Errorf("%q parsed to %+v, which does not read back: %+v, %v", s, p, again, ok)
		}
	})
}
