package main

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestDashboardQueuesInBrowser: the Queues page lists the waiting job in
// the ClusterQueue its LocalQueue admits to, first, coloured as waiting for
// quota, with the GPUs the queue's admitted workload holds and, from the
// ClusterQueue's stored spec, its nominal and borrowed GPUs and a row per
// flavour and resource it sets quota on (cpu and memory too).
func TestDashboardQueuesInBrowser(t *testing.T) {
	url := storetest.URL(t)
	seedETA(t, url)
	st := storetest.Open(t, url)
	now := time.Now()
	if err := st.UpsertKueueWorkloads(context.Background(), []schedloop.KueueWorkload{
		{UID: "w-run", Namespace: "ml", Name: "run", LocalQueue: "lq", ClusterQueue: "cq", CreatedAt: now.Add(-20 * time.Minute),
			Conditions: []schedloop.KueueCondition{{Type: "QuotaReserved", Status: "True", Reason: "QuotaReserved", At: now.Add(-20 * time.Minute)}}},
		{UID: "w-wait", Namespace: "ml", Name: "wait", LocalQueue: "lq", CreatedAt: now.Add(-time.Minute)},
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertKueueClusterQueues(context.Background(), []schedloop.KueueClusterQueue{{Name: "cq", Cohort: "org", ObservedAt: now,
		Quotas: []schedloop.KueueQuota{{Flavor: "h100", Resource: "nvidia.com/gpu", Nominal: 4000, Reserved: 8000, Borrowed: 4000},
			{Flavor: "default", Resource: "cpu", Nominal: 64000, Reserved: 16000},
			{Flavor: "default", Resource: "memory", Nominal: 512 << 30 * 1000, Reserved: 64 << 30 * 1000}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.InsertKueueQuotaRecommendation(context.Background(), schedloop.KueueQuotaRecommendation{Created: now,
		Changes:          []schedloop.KueueQuotaChange{{ClusterQueue: "cq", Flavor: "h100", Resource: "nvidia.com/gpu", From: 4000, To: 8000}},
		QuotaWaitBeforeS: 600, QuotaWaitAfterS: 60, Jobs: 3, Patch: "kubectl patch clusterqueue cq"}); err != nil {
		t.Fatal(err)
	}
	d := serveInBrowser(t, url)
	if err := chromedp.Do(d.browser, chromedp.Navigate(d.base+"/#/queues"), d.ready("queues")); err != nil {
		t.Fatalf("queues page: %v", err)
	}
	d.noError()
	q := `[data-testid=queue][data-queue=cq][data-kind=cluster-queue] `
	if got := d.text(q + `tr[data-uid=wait][data-wait=quota] [data-testid=queue-position]`); got != "1" {
		t.Errorf("ml/wait at position %q, want 1", got)
	}
	if got := d.attr(q+`[data-testid=queue-used]`, "data-gpus"); got != "8" {
		t.Errorf("cq uses %q GPUs, want ml/run's 8", got)
	}
	if got := d.attr(q+`[data-testid=queue-nominal]`, "data-gpus"); got != "4" {
		t.Errorf("cq's nominal quota shows %q GPUs, want 4", got)
	}
	if got := d.attr(q+`[data-testid=queue-borrowed]`, "data-gpus"); got != "4" {
		t.Errorf("cq's borrowed GPUs show %q, want Kueue's 4", got)
	}
	for _, tt := range []struct{ resource, field, want string }{
		{"cpu", "quota-nominal", "64"}, {"cpu", "quota-reserved", "16"},
		{"memory", "quota-nominal", "512Gi"}, {"memory", "quota-reserved", "64Gi"},
		{"nvidia.com/gpu", "quota-borrowed", "4"},
	} {
		sel := q + `[data-testid=queue-quotas] tr[data-resource="` + tt.resource + `"] [data-testid=` + tt.field + `]`
		if got := d.text(sel); got != tt.want {
			t.Errorf("cq's %s %s shows %q, want %q", tt.resource, tt.field, got, tt.want)
		}
	}
	if got := d.text(`[data-testid=quota-recommendation] [data-testid=quota-to]`); got != "8" {
		t.Errorf("the quota proposal's new nominal shows %q, want 8", got)
	}
	if got := d.text(`[data-testid=quota-patch]`); got != "kubectl patch clusterqueue cq" {
		t.Errorf("the quota proposal's patch shows %q", got)
	}
	if got := d.attr(q+`tr[data-uid=wait] [data-testid=queue-wait]`, "style"); got == "" {
		t.Error("the wait badge has no colour")
	}
	d.shot("queues.png")
}
