package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/api/apitest"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// chromiumPath finds Debian's chromium; the test fails (never skips) without it.
func chromiumPath(t *testing.T) string {
	for _, p := range []string{os.Getenv("SCHEDLOOP_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	t.Fatal("no chromium for the dashboard browser test: install Debian's package (apt-get install -y chromium) " +
		"or point SCHEDLOOP_CHROMIUM at a Chromium binary")
	return ""
}

// artifactsDir is where screenshots go: $SCHEDLOOP_ARTIFACTS, or a fixed
// directory under the system temp dir so they outlive the test.
func artifactsDir(t *testing.T) string {
	dir := os.Getenv("SCHEDLOOP_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "schedloop-artifacts")
	}
	dir = filepath.Join(dir, "dashboard")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDashboardInBrowser fills a database with a seeded history through
// the store's writes and rollups, serves it with `collector serve`, and
// drives the three pages in headless Chromium: each must show the numbers
// the test computes from the database itself.
func TestDashboardInBrowser(t *testing.T) {
	url := storetest.URL(t)
	st := storetest.Open(t, url)
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	hist, err := apitest.Fill(context.Background(), st, 7, time.Now(), 24)
	if err != nil {
		t.Fatal(err)
	}
	d := serveInBrowser(t, url)
	browser, base := d.browser, d.base
	ready, text, number, attr, shot, noError := d.ready, d.text, d.number, d.attr, d.shot, d.noError

	// Page 1: GPU idle time over the last 24 hours.
	if err := chromedp.Do(browser, chromedp.Navigate(base+"/#/idle"),
		chromedp.SetValue(chromedp.CSS(`select[name=range]`), "-24h"),
		chromedp.Click(chromedp.CSS(`#filters button`)), ready("idle"),
		chromedp.WaitVisible(chromedp.CSS(`#heatmap .hrow[data-node]`))); err != nil {
		t.Fatalf("idle page: %v", err)
	}
	noError()
	from, _ := time.Parse(time.RFC3339, attr(`[data-testid=range]`, "data-from"))
	to, _ := time.Parse(time.RFC3339, attr(`[data-testid=range]`, "data-to"))
	want, err := st.GPUIdleBreakdown(context.Background(), from, to)
	if err != nil {
		t.Fatal(err)
	}
	if want.Total() == 0 {
		t.Fatalf("the page's range %s..%s holds no GPU time; history is %s..%s", from, to, hist.From, hist.To)
	}
	for id, minutes := range map[string]int64{"total-busy": want.BusyMinutes, "total-allocated_idle": want.AllocatedIdleMinutes,
		"total-unallocated_waiting": want.UnallocatedWaitingMinutes, "total-spare": want.SpareMinutes} {
		if got := number(`[data-testid=` + id + `]`); math.Abs(got-float64(minutes)/60) > 0.051 {
			t.Errorf("idle page %s = %v GPU-h, database %v", id, got, float64(minutes)/60)
		}
	}
	if got := number(`[data-testid=idle-share]`); math.Abs(got-100*want.IdleShare()) > 0.051 {
		t.Errorf("idle share on the page %v%%, database %v%%", got, 100*want.IdleShare())
	}
	if rows := d.count(`#heatmap .hrow[data-node]`); rows != len(hist.Nodes) {
		t.Errorf("heatmap has %d node rows, want %d", rows, len(hist.Nodes))
	}
	// The top idle holder, computed here from the per-minute rollup.
	var topJob string
	var topIdle int64
	if err := st.Pool().QueryRow(context.Background(), `
		SELECT p.job_uid, count(*) FROM gpu_minutes g JOIN pods p ON p.namespace = g.pod_namespace AND p.name = g.pod_name
		WHERE g.minute >= $1 AND g.minute < $2 AND greatest(g.gr_engine_active_avg, g.gpu_util_avg / 100) < $3
		GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 1`, from, to, store.DefaultIdleThreshold).Scan(&topJob, &topIdle); err != nil {
		t.Fatal(err)
	}
	firstJob := attr(`[data-testid=holders] tbody tr`, "data-job")
	if got := number(`[data-testid=holders] tbody tr td[data-testid=holder-idle]`); firstJob != topJob || math.Abs(got-float64(topIdle)/60) > 0.051 {
		t.Errorf("top idle holder on the page: job %s with %v GPU-h; database: job %s with %v GPU-h", firstJob, got, topJob, float64(topIdle)/60)
	}
	shot("idle.png")

	// Page 2: search a pod, read its wait breakdown.
	q := hist.Gated.Namespace + "/" + hist.Gated.Name
	if err := chromedp.Do(browser, chromedp.Navigate(base+"/#/why"), ready("why"),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=search-input]`), q),
		chromedp.Click(chromedp.CSS(`#search button`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=story][data-uid="`+hist.Gated.UID+`"]`)), ready("why")); err != nil {
		t.Fatalf("why page, search %s: %v", q, err)
	}
	noError()
	bd, err := st.PodWaitBreakdown(context.Background(), hist.Gated.UID)
	if err != nil {
		t.Fatal(err)
	}
	for cat, sec := range bd {
		if got := number(`[data-testid=breakdown-` + cat + `]`); math.Abs(got-math.Round(sec)) > 0.5 {
			t.Errorf("why page: %s waited %v s on the page, %v s in the database", cat, got, sec)
		}
	}
	if tl := text(`[data-testid=timeline]`); !strings.Contains(tl, "gang incomplete: 1/2 members") || !strings.Contains(tl, "running on "+hist.Gated.Node) {
		t.Errorf("timeline lacks the gang and running labels:\n%s", tl)
	}
	// Cluster-wide reasons: all of the history's waiting lies in the range.
	var reasonRows []struct {
		Category string
		Seconds  float64
	}
	rs, err := st.Pool().Query(context.Background(), `SELECT category, sum(seconds) FROM pod_wait_breakdown GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var r struct {
			Category string
			Seconds  float64
		}
		if err := rs.Scan(&r.Category, &r.Seconds); err != nil {
			t.Fatal(err)
		}
		reasonRows = append(reasonRows, r)
	}
	if len(reasonRows) < 4 {
		t.Fatalf("history has only %d wait categories", len(reasonRows))
	}
	for _, r := range reasonRows {
		if got := number(`[data-testid=reason-` + r.Category + `]`); math.Abs(got-r.Seconds/3600) > 0.051 {
			t.Errorf("top wait reasons: %s = %v pod-h on the page, %v in the database", r.Category, got, r.Seconds/3600)
		}
	}
	shot("why-pod.png")
	if err := chromedp.Do(browser, chromedp.Navigate(base+"/#/why?kind=job&q="+hist.GangJob.UID),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=story][data-uid="`+hist.GangJob.UID+`"]`)), ready("why")); err != nil {
		t.Fatalf("why page, job %s: %v", hist.GangJob.UID, err)
	}
	noError()
	shot("why-job.png")

	// Page 3: profiles, their status, outcomes and a diff.
	if err := chromedp.Do(browser, chromedp.Navigate(base+"/#/profiles"), ready("profiles"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=diff] li`))); err != nil {
		t.Fatalf("profiles page: %v", err)
	}
	noError()
	ps, err := st.ListProfiles(context.Background(), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if got := text(fmt.Sprintf(`[data-testid=status-%d]`, p.ID)); got != strings.ReplaceAll(string(p.Status), "_", " ") {
			t.Errorf("profile %d status on the page %q, database %q", p.ID, got, p.Status)
		}
		if p.Name == "tuned-002" { // the fixture's profile with seeded evidence
			if got := text(fmt.Sprintf(`[data-testid=seed-%d]`, p.ID)); got != "seed 42; check: tuner verify tuned-002" {
				t.Errorf("profile %d shows %q, want its seed and verify command", p.ID, got)
			}
			// Its evidence measured the run-time predictor on the held-out jobs.
			if got := strings.Join(strings.Fields(text(fmt.Sprintf(`[data-testid=prediction-%d]`, p.ID))), " "); got != "Spearman 0.71, 64% within 2× of actual 120 jobs" {
				t.Errorf("profile %d prediction on the page %q, want Spearman 0.71, 64%% within 2× of actual, 120 jobs", p.ID, got)
			}
		}
		for k, v := range p.Measured {
			if got := number(fmt.Sprintf(`[data-testid=meas-%d-%s]`, p.ID, k)); math.Abs(got-v) > 1e-3*math.Max(1, math.Abs(v)) {
				t.Errorf("profile %d measured %s on the page %v, database %v", p.ID, k, got, v)
			}
		}
		for k, v := range p.Predicted {
			if got := number(fmt.Sprintf(`[data-testid=pred-%d-%s]`, p.ID, k)); math.Abs(got-v) > 1e-3*math.Max(1, math.Abs(v)) {
				t.Errorf("profile %d predicted %s on the page %v, database %v", p.ID, k, got, v)
			}
		}
	}
	// The default comparison is the second-newest against the newest.
	wantDiff := profile.Diff(profile.FromDomain(ps[1]), profile.FromDomain(ps[0]))
	if got := text(`[data-testid=diff]`); got != strings.Join(wantDiff, "\n") {
		t.Errorf("diff on the page:\n%s\nwant:\n%s", got, strings.Join(wantDiff, "\n"))
	}
	shot("profiles.png")

	// Page 4: the inventory, a partitioned GPU's instances under it.
	const migGPU = "GPU-mig-e2e"
	if err := st.RecordGPUs(context.Background(), []schedloop.GPU{
		{UUID: migGPU, Node: "mig-node", Index: 0, Model: "NVIDIA A100-SXM4-80GB", MIGProfile: "1g.10gb", Instance: "9"},
		{UUID: migGPU, Node: "mig-node", Index: 0, Model: "NVIDIA A100-SXM4-80GB", MIGProfile: "3g.40gb", Instance: "2"},
	}); err != nil {
		t.Fatal(err)
	}
	// A 2g instance the DRA driver publishes, which no telemetry has named
	// by its GPU instance id yet: it is listed by its MIG UUID.
	const sliceOnly = "MIG-slice-only-e2e"
	if err := st.ReplaceDRADevices(context.Background(), []schedloop.DRADevice{{Driver: "gpu.nvidia.com", Pool: "mig-node",
		Device: "gpu-0-mig-2g", Node: "mig-node", Type: "mig", UUID: sliceOnly, ParentUUID: migGPU,
		Product: "NVIDIA A100-SXM4-80GB", Profile: "2g.20gb"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(browser, chromedp.Navigate(base+"/#/gpus"), ready("gpus"),
		chromedp.SetValue(chromedp.CSS(`input[name=node]`), "mig-node"),
		chromedp.Click(chromedp.CSS(`#filters button`)), ready("gpus"),
		chromedp.WaitVisible(chromedp.CSS(`tr.instance[data-instance="9"]`))); err != nil {
		t.Fatalf("GPUs page: %v", err)
	}
	noError()
	for inst, want := range map[string]string{"2": "42.9% of the GPU", "9": "14.3% of the GPU"} {
		if got := text(`tr.instance[data-uuid="` + migGPU + `"][data-instance="` + inst + `"] [data-testid=instance-share]`); got != want {
			t.Errorf("GPUs page: instance %s shows %q, want %q", inst, got, want)
		}
	}
	if got := text(`tr.instance[data-uuid="` + migGPU + `"][data-mig-uuid="` + sliceOnly + `"] [data-testid=instance-share]`); got != "28.6% of the GPU" {
		t.Errorf("GPUs page: the DRA-published instance shows %q, want %q", got, "28.6% of the GPU")
	}
	// Instances follow their GPU's row, in instance order, those known only
	// by MIG UUID last.
	if got := text(`[data-testid=gpus] tbody`); !strings.Contains(got, migGPU) ||
		strings.Index(got, "instance 2") < strings.Index(got, migGPU) || strings.Index(got, "instance 9") < strings.Index(got, "instance 2") ||
		strings.Index(got, sliceOnly) < strings.Index(got, "instance 9") {
		t.Errorf("GPUs page: instances are not listed under their GPU:\n%s", got)
	}
	shot("gpus.png")
}
