package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/reasons"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/ from current output")

func TestParseFailedScheduling(t *testing.T) {
	tests := []struct {
		name       string
		msg        string
		total      int
		reasons    map[string]int
		preemption map[string]int
		category   schedloop.WaitCategory
		parsed     bool
	}{
		{
			name:  "gpu and spread, spread covers most nodes",
			msg:   "0/64 nodes are available: 8 Insufficient nvidia.com/gpu, 56 node(s) didn't match pod topology spread constraints.",
			total: 64,
			reasons: map[string]int{
				"Insufficient nvidia.com/gpu":                          8,
				"node(s) didn't match pod topology spread constraints": 56,
			},
			category: schedloop.WaitTopology, parsed: true,
		},
		{
			name:  "nodes reserved for a job ahead",
			msg:   "0/8 nodes are available: 5 reserved for ml/big, 3 Insufficient nvidia.com/gpu.",
			total: 8,
			reasons: map[string]int{
				"reserved for ml/big":         5,
				"Insufficient nvidia.com/gpu": 3,
			},
			category: schedloop.WaitReserved, parsed: true,
		},
		{
			name:       "preemption suffix kept apart",
			msg:        "0/64 nodes are available: 64 Insufficient nvidia.com/gpu. preemption: 0/64 nodes are available: 64 No preemption victims found for incoming pod.",
			total:      64,
			reasons:    map[string]int{"Insufficient nvidia.com/gpu": 64},
			preemption: map[string]int{"No preemption victims found for incoming pod": 64},
			category:   schedloop.WaitInsufficientGPU, parsed: true,
		},
		{
			name:  "taint with braces and comma",
			msg:   "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: gpu, 3 a100}, 3 Insufficient nvidia.com/gpu.",
			total: 5,
			reasons: map[string]int{
				"node(s) had untolerated taint {dedicated: gpu, 3 a100}": 2,
				"Insufficient nvidia.com/gpu":                            3,
			},
			category: schedloop.WaitInsufficientGPU, parsed: true,
		},
		{
			name:     "tie goes to gpu",
			msg:      "0/8 nodes are available: 4 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity/selector.",
			total:    8,
			reasons:  map[string]int{"Insufficient nvidia.com/gpu": 4, "node(s) didn't match Pod's node affinity/selector": 4},
			category: schedloop.WaitInsufficientGPU, parsed: true,
		},
		{
			name:     "coscheduling prefilter applies to every node",
			msg:      "0/16 nodes are available: pre-filter pod job-a-0 cannot find enough sibling pods, current pods number: 2, minMember of group: 4.",
			total:    16,
			reasons:  map[string]int{"pre-filter pod job-a-0 cannot find enough sibling pods, current pods number: 2, minMember of group: 4": 16},
			category: schedloop.WaitGangIncomplete, parsed: true,
		},
		{
			name:     "plugin error",
			msg:      `running PreFilter plugin "Coscheduling": pre-filter pod job-a-0 cannot find enough sibling pods, current pods number: 2, minMember of group: 4`,
			reasons:  map[string]int{"pre-filter pod job-a-0 cannot find enough sibling pods, current pods number: 2, minMember of group: 4": 0},
			category: schedloop.WaitGangIncomplete, parsed: true,
		},
		{
			name:     "permit timeout",
			msg:      "rejected due to timeout after waiting 60s at permit",
			reasons:  map[string]int{"rejected due to timeout after waiting 60s at permit": 0},
			category: schedloop.WaitGangIncomplete, parsed: true,
		},
		{
			name:     "own gang reason",
			msg:      "0/64 nodes are available: " + reasons.GangIncomplete("ml", "job-a", 3, 4) + ".",
			total:    64,
			reasons:  map[string]int{"gang ml/job-a incomplete: 3/4 members": 64},
			category: schedloop.WaitGangIncomplete, parsed: true,
		},
		{
			name:     "own gang reason, every member present, GPUs short",
			msg:      "0/64 nodes are available: " + reasons.GangNoRoom("ml", "solo", reasons.ShortGPUs, 0, 1) + ".",
			total:    64,
			reasons:  map[string]int{"gang ml/solo waits for GPUs: free capacity fits 0/1 members": 64},
			category: schedloop.WaitInsufficientGPU, parsed: true,
		},
		{
			name:       "empty PostFilter reason joined before the preemption message",
			msg:        "0/4 nodes are available: gang default/b2 waits for GPUs: free capacity fits 0/1 members. , preemption: 0/4 nodes are available: 4 no set of preemptible jobs of lower priority makes room on the node.",
			total:      4,
			reasons:    map[string]int{"gang default/b2 waits for GPUs: free capacity fits 0/1 members": 4},
			preemption: map[string]int{"no set of preemptible jobs of lower priority makes room on the node": 4},
			category:   schedloop.WaitInsufficientGPU, parsed: true,
		},
		{
			name:       "a gang's member: the gang plugin's PostFilter says it does not preempt",
			msg:        "0/8 nodes are available: gang default/big waits for GPUs: free capacity fits 56/64 members. " + reasons.GangNoPreempt("default/big"),
			total:      8,
			reasons:    map[string]int{"gang default/big waits for GPUs: free capacity fits 56/64 members": 8},
			preemption: map[string]int{"gang default/big does not preempt: only lone pods evict others": 0},
			category:   schedloop.WaitInsufficientGPU, parsed: true,
		},
		{
			name:     "own gang reason, every member present, CPU or memory short",
			msg:      "0/64 nodes are available: " + reasons.GangNoRoom("ml", "big", reasons.ShortCPUMemory, 2, 4) + ".",
			total:    64,
			reasons:  map[string]int{"gang ml/big waits for CPU or memory: free capacity fits 2/4 members": 64},
			category: schedloop.WaitInsufficientCPU, parsed: true,
		},
		{
			name:     "own queue reason",
			msg:      "0/64 nodes are available: " + reasons.QueueAtLimit("research", 64) + ".",
			total:    64,
			reasons:  map[string]int{"queue research at limit 64 GPUs": 64},
			category: schedloop.WaitQueueLimit, parsed: true,
		},
		{
			name:     "own topology reason among counted reasons",
			msg:      "0/64 nodes are available: 40 " + reasons.TopologyUnsatisfied(16, "rack", 8) + ", 24 Insufficient nvidia.com/gpu.",
			total:    64,
			reasons:  map[string]int{"topology: gang needs 16 GPUs within one rack; largest free rack has 8": 40, "Insufficient nvidia.com/gpu": 24},
			category: schedloop.WaitTopology, parsed: true,
		},
		{
			name:     "a node short of cpu and memory counts once",
			msg:      "0/12 nodes are available: 4 Insufficient cpu, 4 Insufficient memory, 6 Insufficient nvidia.com/gpu.",
			total:    12,
			reasons:  map[string]int{"Insufficient cpu": 4, "Insufficient memory": 4, "Insufficient nvidia.com/gpu": 6},
			category: schedloop.WaitInsufficientGPU, parsed: true,
		},
		{
			name:     "unknown text",
			msg:      "something the scheduler never said",
			category: schedloop.WaitOther,
		},
		{
			name:     "count overflows int",
			msg:      "0/99999999999999999999 nodes are available: 1 Insufficient cpu.",
			category: schedloop.WaitOther,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseFailedScheduling(tt.msg)
			if got.Parsed != tt.parsed {
				t.Errorf("Parsed = %v, want %v", got.Parsed, tt.parsed)
			}
			if got.TotalNodes != tt.total {
				t.Errorf("TotalNodes = %d, want %d", got.TotalNodes, tt.total)
			}
			if !maps.Equal(got.Reasons, tt.reasons) {
				t.Errorf("Reasons = %v, want %v", got.Reasons, tt.reasons)
			}
			if !maps.Equal(got.Preemption, tt.preemption) {
				t.Errorf("Preemption = %v, want %v", got.Preemption, tt.preemption)
			}
			if got.Category != tt.category {
				t.Errorf("Category = %q, want %q", got.Category, tt.category)
			}
			if got.Message != tt.msg {
				t.Errorf("Message = %q, want the raw input", got.Message)
			}
		})
	}
}

func TestAttempt(t *testing.T) {
	f := ParseFailedScheduling("0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.")
	var a schedloop.SchedulingAttempt
	f.Attempt(&a)
	want := map[string]int{
		"Insufficient nvidia.com/gpu":                              3,
		"preemption: No preemption victims found for incoming pod": 3,
	}
	if !maps.Equal(a.Reasons, want) || a.TotalNodes != 3 || a.Category != schedloop.WaitInsufficientGPU || a.Message != f.Message {
		t.Errorf("Attempt = %+v, want reasons %v, 3 nodes, insufficient_gpu", a, want)
	}
}

func TestParserCounters(t *testing.T) {
	p := NewParser()
	p.Parse("something the scheduler never said")
	p.Parse("0/3 nodes are available: 3 node(s) were struck by lightning.")
	p.Parse("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
	p.Parse("0/3 nodes are available: 1 reserved for ml/big, 2 Insufficient nvidia.com/gpu.")
	if got := testutil.ToFloat64(p.unparsed); got != 1 {
		t.Errorf("unparsed = %v, want 1", got)
	}
	if got := testutil.ToFloat64(p.unknownReasons); got != 1 {
		t.Errorf("unknown reasons = %v, want 1", got)
	}
}

// goldenResult is FailedScheduling with the raw message and category in a
// stable, readable order for the golden file.
type goldenResult struct {
	Message         string                 `json:"message"`
	Parsed          bool                   `json:"parsed"`
	Category        schedloop.WaitCategory `json:"category"`
	TotalNodes      int                    `json:"totalNodes"`
	Reasons         map[string]int         `json:"reasons,omitempty"`
	PreemptionNodes int                    `json:"preemptionNodes,omitempty"`
	Preemption      map[string]int         `json:"preemption,omitempty"`
	Plugin          string                 `json:"plugin,omitempty"`
}

func TestGoldenFailedScheduling(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "failedscheduling.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var results []goldenResult
	sc := bufio.NewScanner(bytes.NewReader(in))
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		results = append(results, golden(ParseFailedScheduling(line)))
	}
	compareGolden(t, results, "failedscheduling.golden.json", "TestGoldenFailedScheduling")
}

func golden(f FailedScheduling) goldenResult {
	return goldenResult{
		Message: f.Message, Parsed: f.Parsed, Category: f.Category, TotalNodes: f.TotalNodes,
		Reasons: f.Reasons, PreemptionNodes: f.PreemptionNodes, Preemption: f.Preemption, Plugin: f.Plugin,
	}
}

// compareGolden checks results against testdata/name, rewriting it under -update.
func compareGolden(t *testing.T, results []goldenResult, name, test string) {
	t.Helper()
	got, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run go test -run %s -update and review the diff):\n%s", path, test, got)
	}
}

// checkParseInvariants is what every input, however hostile, must give.
func checkParseInvariants(t *testing.T, msg string) {
	got := ParseFailedScheduling(msg)
	if got.Message != msg {
		t.Fatalf("Message = %q, want the raw input %q", got.Message, msg)
	}
	if got.Category == "" {
		t.Fatalf("empty category for %q", msg)
	}
	if !got.Parsed && (got.Category != schedloop.WaitOther || len(got.Reasons) != 0) {
		t.Fatalf("unparsed message %q got category %q and reasons %v", msg, got.Category, got.Reasons)
	}
	for r, n := range got.Reasons {
		if n < 0 {
			t.Fatalf("negative count %d for reason %q in %q", n, r, msg)
		}
	}
}

func FuzzParseFailedScheduling(f *testing.F) {
	in, err := os.ReadFile(filepath.Join("testdata", "failedscheduling.txt"))
	if err != nil {
		f.Fatal(err)
	}
	for _, line := range strings.Split(string(in), "\n") {
		f.Add(line)
	}
	f.Add("0/1 nodes are available: {, 1 a}, 1 b. preemption: 0/1 nodes are available: ")
	f.Add(`running PreFilter plugin "X": 0/2 nodes are available: 2 Insufficient cpu.`)
	f.Fuzz(checkParseInvariants)
}

// TestRepeatedEventKeepsItsFirstAttempt: an event first seen with a count
// of 3 (created and counted up between two writes, or found by a re-list)
// still records the attempt of its first occurrence.
func TestRepeatedEventKeepsItsFirstAttempt(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 9, 2, 1, 0, time.UTC)
	e := schedloop.Event{UID: "ev-1", InvolvedKind: "Pod", InvolvedUID: "pod-1", Reason: "FailedScheduling",
		Message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", Count: 3, FirstSeen: t0, LastSeen: t0.Add(time.Minute)}
	got := attempts(e, NewParser())
	if len(got) != 2 {
		t.Fatalf("got %d attempts, want the latest and the first: %+v", len(got), got)
	}
	for i, want := range []struct {
		key string
		at  time.Time
	}{{"ev-1/3", t0.Add(time.Minute)}, {"ev-1/1", t0}} {
		if got[i].Key != want.key || !got[i].At.Equal(want.at) || got[i].Category != schedloop.WaitInsufficientGPU || got[i].PodUID != "pod-1" {
			t.Errorf("attempt %d = %+v, want key %s at %s, insufficient_gpu, pod-1", i, got[i], want.key, want.at)
		}
	}
	e.Count, e.LastSeen = 1, t0
	if got := attempts(e, NewParser()); len(got) != 1 || got[0].Key != "ev-1/1" {
		t.Errorf("a first occurrence gave %+v, want one attempt ev-1/1", got)
	}
}
