package reasons

import (
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		reason string
		want   Parsed
	}{
		{GangIncomplete("ml", "job-a", 3, 4), Parsed{Kind: KindGangIncomplete, Namespace: "ml", Name: "job-a", Have: 3, Want: 4}},
		{GangNoRoom("ml", "job-a", ShortGPUs, 0, 1), Parsed{Kind: KindGangNoRoom, Namespace: "ml", Name: "job-a", Short: ShortGPUs, Have: 0, Want: 1}},
		{GangNoRoom("ml", "job-a", ShortCPUMemory, 2, 4), Parsed{Kind: KindGangNoRoom, Namespace: "ml", Name: "job-a", Short: ShortCPUMemory, Have: 2, Want: 4}},
		{QueueAtLimit("research", 64), Parsed{Kind: KindQueueLimit, Name: "research", Limit: 64}},
		{QueueAtGangLimit("research", 2), Parsed{Kind: KindQueueLimit, Name: "research", Limit: 2, RunningGangs: true}},
		{TopologyUnsatisfied(16, "rack", 8), Parsed{Kind: KindTopology, GPUs: 16, Level: "rack", Largest: 8}},
		{Reserved("ml/big-gang"), Parsed{Kind: KindReserved, Namespace: "ml", Name: "big-gang"}},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			got, ok := Parse(tt.reason)
			if !ok {
				t.Fatalf("Parse(%q) not recognised", tt.reason)
			}
			if got != tt.want {
				t.Errorf("Parse(%q) = %+v, want %+v", tt.reason, got, tt.want)
			}
		})
	}
}

func TestStableStrings(t *testing.T) {
	// These literals are stored history; a failure here means a format changed.
	if got, want := GangIncomplete("ml", "job-a", 3, 4), "gang ml/job-a incomplete: 3/4 members"; got != want {
		t.Errorf("GangIncomplete = %q, want %q", got, want)
	}
	if got, want := GangNoRoom("ml", "job-a", ShortGPUs, 0, 1), "gang ml/job-a waits for GPUs: free capacity fits 0/1 members"; got != want {
		t.Errorf("GangNoRoom = %q, want %q", got, want)
	}
	if got, want := GangNoPreempt("ml/big"), "gang ml/big does not preempt: only lone pods evict others"; got != want {
		t.Errorf("GangNoPreempt = %q, want %q", got, want)
	}
	if got, want := Reserved("ml/big"), "reserved for ml/big"; got != want {
		t.Errorf("Reserved = %q, want %q", got, want)
	}
	if got, want := QueueAtLimit("research", 64), "queue research at limit 64 GPUs"; got != want {
		t.Errorf("QueueAtLimit = %q, want %q", got, want)
	}
	if got, want := QueueAtGangLimit("research", 2), "queue research at limit 2 running gangs"; got != want {
		t.Errorf("QueueAtGangLimit = %q, want %q", got, want)
	}
	if got, want := TopologyUnsatisfied(16, "rack", 8), "topology: gang needs 16 GPUs within one rack; largest free rack has 8"; got != want {
		t.Errorf("TopologyUnsatisfied = %q, want %q", got, want)
	}
}

func TestNoCountSeparator(t *testing.T) {
	// kube-scheduler joins reasons with ", <count> "; ours must never contain that.
	for _, r := range []string{GangIncomplete("a", "b", 1, 2), GangNoRoom("a", "b", ShortCPUMemory, 1, 2), QueueAtLimit("q", 1), QueueAtGangLimit("q", 1), TopologyUnsatisfied(8, "rack", 4)} {
		if strings.Contains(r, ", ") {
			t.Errorf("reason %q contains \", \"", r)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{
		"",
		"Insufficient nvidia.com/gpu",
		"gang ml/job-a incomplete: 3/4",
		"queue research at limit many GPUs",
		"queue research at limit 2 gangs",
		"queue research at limit 99999999999999999999 running gangs",
		"gang ml/job incomplete: 99999999999999999999/4 members",
		"gang ml/job waits for disks: free capacity fits 0/1 members",
		"gang ml/job waits for GPUs: free capacity fits 0/99999999999999999999 members",
		"topology: gang needs 16 GPUs within one rack; largest free host has 8",
	} {
		if p, ok := Parse(s); ok {
			t.Errorf("Parse(%q) = %+v, want not recognised", s, p)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Reserved("ml/big-gang"))
	f.Add(GangIncomplete("ml", "job-a", 3, 4))
	f.Add(GangNoRoom("ml", "job-a", ShortGPUs, 0, 1))
	f.Add(TopologyUnsatisfied(16, "rack", 8))
	f.Add("reserved for x")
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := Parse(s)
		if !ok {
			return
		}
		// Every recognised reason is one its writer writes.
		var back string
		switch {
		case p.Kind == KindReserved:
			back = Reserved(p.Namespace + "/" + p.Name)
		case p.Kind == KindGangIncomplete:
			back = GangIncomplete(p.Namespace, p.Name, p.Have, p.Want)
		case p.Kind == KindGangNoRoom:
			back = GangNoRoom(p.Namespace, p.Name, p.Short, p.Have, p.Want)
		case p.Kind == KindTopology:
			back = TopologyUnsatisfied(p.GPUs, p.Level, p.Largest)
		case p.RunningGangs:
			back = QueueAtGangLimit(p.Name, p.Limit)
		default:
			back = QueueAtLimit(p.Name, p.Limit)
		}
		if again, ok := Parse(back); !ok || again != p {
			t.Errorf("%q parsed to %+v, written back as %q, which reads %+v, %v", s, p, back, again, ok)
		}
	})
}
