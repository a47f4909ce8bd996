package events

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/schedloop/schedloop"
)

type conditionLine struct {
	section                      string
	typ, status, reason, message string
}

func readConditionCorpus(t testing.TB) []conditionLine {
	in, err := os.ReadFile(filepath.Join("testdata", "kueue_conditions.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out []conditionLine
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(in))
	for sc.Scan() {
		line := sc.Text()
		for _, s := range []string{"known", "unknown", "none"} {
			if line == "# "+s+":" {
				section = s
			}
		}
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.SplitN(line, "|", 4)
		if len(parts) != 4 || section == "" {
			t.Fatalf("condition line %q: want type|status|reason|message after a section", line)
		}
		out = append(out, conditionLine{section, parts[0], parts[1], parts[2], parts[3]})
	}
	return out
}

// TestWorkloadConditionCorpus files every real condition: known ones under a
// specific category, unknown waiting ones under other, and the rest as no
// wait. It prints the share filed under a specific category.
func TestWorkloadConditionCorpus(t *testing.T) {
	specific, waiting := 0, 0
	var results []goldenResult
	for _, l := range readConditionCorpus(t) {
		f, w := ParseWorkloadCondition(l.typ, l.status, l.reason, l.message)
		if w != (l.section != "none") {
			t.Errorf("%s=%s %s: waiting %v, want %v", l.typ, l.status, l.reason, w, l.section != "none")
		}
		if l.section == "known" && f.Category == schedloop.WaitOther {
			t.Errorf("%s=%s %s %q filed under other, want a specific category", l.typ, l.status, l.reason, l.message)
		}
		if l.section == "unknown" && f.Category != schedloop.WaitOther {
			t.Errorf("%s=%s %s filed under %s, want other", l.typ, l.status, l.reason, f.Category)
		}
		if w {
			waiting++
			if f.Category != schedloop.WaitOther {
				specific++
			}
		}
		r := golden(f)
		r.Message = l.typ + "=" + l.status + " " + l.reason + ": " + l.message
		results = append(results, r)
	}
	t.Logf("Kueue conditions: %d of %d waiting conditions (%.1f%%) filed under a specific category",
		specific, waiting, 100*float64(specific)/float64(waiting))
	compareGolden(t, results, "kueue_conditions.golden.json", "TestWorkloadConditionCorpus")
}

func TestWorkloadConditionCategories(t *testing.T) {
	for _, tt := range []struct {
		typ, status, reason, msg string
		want                     schedloop.WaitCategory
	}{
		// The message says quota, the reason says topology: the reason wins.
		{"QuotaReserved", "False", "TopologyPlacementFailed", "couldn't assign flavors to pod set two: insufficient unused quota for cpu in flavor default, 1 more needed", schedloop.WaitTopology},
		{"QuotaReserved", "False", "WaitingForQuota", "", schedloop.WaitQuota},
		{"Evicted", "True", "InactiveWorkload", "", schedloop.WaitQuota},
		{"QuotaReserved", "False", "SomethingNew", "", schedloop.WaitOther},
	} {
		f, w := ParseWorkloadCondition(tt.typ, tt.status, tt.reason, tt.msg)
		if !w || f.Category != tt.want {
			t.Errorf("%s=%s %s %q: category %s waiting %v, want %s", tt.typ, tt.status, tt.reason, tt.msg, f.Category, w, tt.want)
		}
	}
	p := NewParser()
	if _, w := p.ParseWorkloadCondition("Evicted", "True", "SomethingNew", "x"); !w {
		t.Fatal("unknown eviction reason: want waiting")
	}
	if got := testutil.ToFloat64(p.unparsed); got != 1 {
		t.Errorf("unparsed counter = %v after one unknown condition, want 1", got)
	}
}

func FuzzParseWorkloadCondition(f *testing.F) {
	for _, l := range readConditionCorpus(f) {
		f.Add(l.typ, l.status, l.reason, l.message)
	}
	f.Fuzz(func(t *testing.T, typ, status, reason, msg string) {
		got, w := ParseWorkloadCondition(typ, status, reason, msg)
		if got.Message != msg {
			t.Fatalf("message not kept: %q", got.Message)
		}
		if !w && (got.Category != schedloop.WaitOther || got.Parsed) {
			t.Fatalf("not waiting but filed: %+v", got)
		}
		if got.Parsed && got.Category == schedloop.WaitOther && len(got.Reasons) == 0 {
			t.Fatalf("parsed under other with no reasons: %+v", got)
		}
	})
}
