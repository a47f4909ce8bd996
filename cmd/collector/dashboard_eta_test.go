package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestDashboardETAInBrowser: the ETA page shows the waiting job's expected
// start as the API answers it, and the what-if form shows a pod larger than
// any node as never fitting, and a manifest that does not decode as the
// API's 400; the header's namespace filter narrows the list.
func TestDashboardETAInBrowser(t *testing.T) {
	url := storetest.URL(t)
	seedETA(t, url)
	d := serveInBrowser(t, url)
	if err := chromedp.Do(d.browser, chromedp.Navigate(d.base+"/#/eta"), d.ready("eta")); err != nil {
		t.Fatalf("eta page: %v", err)
	}
	d.noError()
	// The API keeps an estimate for half a minute, so this is the page's.
	resp, err := http.Get(d.base + "/api/v1/eta")
	if err != nil {
		t.Fatal(err)
	}
	var a struct {
		Jobs []struct {
			UID     string
			WaitP50 *float64 `json:"wait_p50_seconds"`
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	if err != nil || len(a.Jobs) != 1 || a.Jobs[0].WaitP50 == nil {
		t.Fatalf("GET /api/v1/eta: %v %+v, want the waiting job's estimate", err, a)
	}
	row := `[data-testid=eta] tr[data-uid=wait][data-state=starts] `
	p50, err := strconv.ParseFloat(d.attr(row+`[data-testid=eta-p50]`, "data-seconds"), 64)
	if err != nil || p50 != *a.Jobs[0].WaitP50 || *a.Jobs[0].WaitP50 <= 0 {
		t.Errorf("page p50 %v s (%v), API %v s: want the same wait, after ml/run ends", p50, err, *a.Jobs[0].WaitP50)
	}
	if got := d.text(row + `[data-testid=eta-p50]`); !strings.HasPrefix(got, "in ") {
		t.Errorf("expected start shows %q, want \"in …\"", got)
	}
	if got := d.text(row + `[data-testid=eta-waits]`); got != "ml/run" {
		t.Errorf("waits for %q, want ml/run", got)
	}
	d.shot("eta.png")

	// whatIf submits manifest and waits for show, a part of its answer.
	whatIf := func(manifest, show string) {
		t.Helper()
		if err := chromedp.Do(d.browser, chromedp.SetValue(chromedp.CSS(`[data-testid=whatif-manifest]`), manifest),
			chromedp.Click(chromedp.CSS(`#whatif button`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=whatif-answer][data-ready="true"] `+show))); err != nil {
			t.Fatalf("what-if: %v", err)
		}
	}
	whatIf("apiVersion: v1\nkind: Pod\nmetadata: {name: big, namespace: ml}\nspec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: 16}}}]}\n", `[data-testid=whatif-jobs]`)
	if got := d.text(`[data-testid=whatif-jobs] tr[data-uid=what-if][data-state=never-fits] [data-testid=eta-reason]`); !strings.Contains(got, "16 GPUs") {
		t.Errorf("what-if of a 16-GPU pod says %q, want never-fits naming its 16 GPUs", got)
	}
	d.shot("whatif.png")
	whatIf("{{{", `[data-testid=whatif-error]`)
	if got := d.text(`[data-testid=whatif-error]`); !strings.HasPrefix(got, "400: ") || !strings.Contains(got, "body") {
		t.Errorf("what-if of a manifest that does not decode shows %q, want the 400 naming the body", got)
	}

	// The header's filters narrow the list: no pending job is in namespace other.
	if err := chromedp.Do(d.browser, chromedp.SendKeys(chromedp.CSS(`#filters input[name=namespace]`), "other"),
		chromedp.Click(chromedp.CSS(`#filters button`)),
		chromedp.WaitVisible(chromedp.CSS(`main[data-page=eta][data-ready="true"] [data-testid=eta] tbody td[colspan]`))); err != nil {
		t.Fatalf("eta page filtered: %v", err)
	}
	if n := d.count(`[data-testid=eta] tr[data-uid]`); n != 0 {
		t.Errorf("%d pending jobs listed in namespace other, want none", n)
	}
}
