package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/tuner"
)

// TestSurveyReplaysEveryWindow surveys the committed slice: one line per
// window that fits, the summary over all of them, and bad flags refused.
func TestSurveyReplaysEveryWindow(t *testing.T) {
	trace := filepath.Join("..", "..", DefaultTrace)
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"-short", "-survey-every", "35", "-trace", trace}, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatalf("survey: %v\n%s", err, errOut.String())
	}
	t.Log(out.String())
	// 150 jobs, windows of 80 starting every 35: after 0, 35 and 70.
	var skips []string
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) == 9 && strings.HasSuffix(f[2], "%") {
			skips = append(skips, f[0])
			if f[8] != "yes" && f[8] != "no" {
				t.Errorf("window line %q: the last column says whether the tuner published", l)
			}
		}
	}
	if strings.Join(skips, ",") != "0,35,70" {
		t.Errorf("windows after %v jobs, want 0, 35 and 70:\n%s", skips, out.String())
	}
	if !strings.Contains(out.String(), "over 3 windows") || !strings.Contains(out.String(), "exact run times: mean JCT change over 3 windows") {
		t.Errorf("no summary over the 3 windows:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "published in ") || !strings.Contains(out.String(), " of 3 windows, mean JCT change there") {
		t.Errorf("no summary of the tuner's proposals over the 3 windows:\n%s", out.String())
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-survey-every", "-1"}, "flag -survey-every: -1 is negative"},
		{[]string{"-survey-every", "10", "-jobs", "200", "-trace", trace}, "no window of 200"},
	} {
		err := run(t.Context(), tc.args, func(string) string { return "" }, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%v) = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestPickWindowTakesTheMostQueued picks, among the committed slice's
// windows, the one whose stock replay queues the largest share of JCT, and
// refuses a window that does not fit.
func TestPickWindowTakesTheMostQueued(t *testing.T) {
	trace := filepath.Join("..", "..", DefaultTrace)
	c, err := parseFlags([]string{"-short", "-pick-every", "35", "-trace", trace}, func(string) string { return "" }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	got, err := pickWindow(c, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	all, err := loadTrace(c)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := inventory(c)
	if err != nil {
		t.Fatal(err)
	}
	cluster := sim.NewCluster(inv)
	stock, err := beforeProfile(c)
	if err != nil {
		t.Fatal(err)
	}
	share := map[int]float64{}
	for _, skip := range []int{0, 35, 70} {
		jobs, err := windowJobs(all, c, skip)
		if err != nil {
			t.Fatal(err)
		}
		m, err := replayWindow(cluster, jobs, tuner.FromDocument(stock).Params, tuner.FitPredictor(jobs), false)
		if err != nil {
			t.Fatal(err)
		}
		share[skip] = m.MeanWait / m.MeanJCT
	}
	for skip, s := range share {
		if s > share[got] {
			t.Errorf("picked the window after %d jobs (queueing %.2f of JCT), the one after %d queues %.2f", got, share[got], skip, s)
		}
	}
	if !strings.Contains(out.String(), "of 3 windows starting every 35 jobs") {
		t.Errorf("no line naming the rule: %q", out.String())
	}
	c.jobs = 151
	if _, err := pickWindow(c, &out); err == nil || !strings.Contains(err.Error(), "no window of 151") {
		t.Errorf("a window longer than the trace: %v", err)
	}
}

func TestShortPresetIsThePickedWindow(t *testing.T) {
	c, err := parseFlags([]string{"-short", "-trace", filepath.Join("..", "..", DefaultTrace), "-pick-every", strconv.Itoa(shortPickEvery)},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	got, err := pickWindow(c, &out)
	if err != nil {
		t.Fatal(err)
	}
	if got != shortPreset.skip {
		t.Errorf("the rule picks the window after %d jobs (%s); the short preset starts after %d", got, strings.TrimSpace(out.String()), shortPreset.skip)
	}
}
