package api_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/api/apitest"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

var ctx = context.Background()

func get(t *testing.T, h http.Handler, path string, header map[string]string, out any) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("GET %s: %d %q is not JSON: %v", path, rec.Code, rec.Body.String(), err)
		}
	}
	return rec.Code
}

func TestAPIServesTheRollups(t *testing.T) {
	st := storetest.New(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	hist, err := apitest.Fill(ctx, st, 7, now, 24)
	if err != nil {
		t.Fatal(err)
	}
	h := api.NewRouter(st, api.Options{Now: func() time.Time { return now }})

	var idle struct {
		Range  struct{ From, To time.Time }
		Totals map[string]float64
		Series []map[string]any
	}
	if code := get(t, h, "/api/v1/idle?from=-24h", nil, &idle); code != 200 {
		t.Fatalf("idle: %d", code)
	}
	want, err := st.GPUIdleBreakdown(ctx, idle.Range.From, idle.Range.To)
	if err != nil {
		t.Fatal(err)
	}
	if want.Total() != 4*8*24*60 {
		t.Fatalf("history holds %d GPU-minutes, want every GPU-minute of a day (%d)", want.Total(), 4*8*24*60)
	}
	for k, v := range map[string]int64{"busy": want.BusyMinutes, "allocated_idle": want.AllocatedIdleMinutes,
		"unallocated_waiting": want.UnallocatedWaitingMinutes, "spare": want.SpareMinutes} {
		if math.Abs(idle.Totals[k]-float64(v)/60) > 1e-9 {
			t.Errorf("idle totals %s = %v GPU-h, database says %v", k, idle.Totals[k], float64(v)/60)
		}
	}
	if len(idle.Series) != 24 {
		t.Errorf("hourly series has %d points, want 24", len(idle.Series))
	}

	// Pages of groups chain through next_cursor and cover every node once.
	seen := map[string]bool{}
	cursor := ""
	for page := 0; page < 5; page++ {
		var g struct {
			Groups []struct{ Key string }
			Next   string `json:"next_cursor"`
		}
		if code := get(t, h, "/api/v1/idle/groups?from=-24h&group_by=node&limit=3&cursor="+cursor, nil, &g); code != 200 {
			t.Fatalf("groups page %d: %d", page, code)
		}
		for _, x := range g.Groups {
			seen[x.Key] = true
		}
		if cursor = g.Next; cursor == "" {
			break
		}
	}
	if len(seen) != len(hist.Nodes) {
		t.Errorf("group pages covered %v, want all %d nodes", seen, len(hist.Nodes))
	}
	var pool struct{ Groups []struct{ Key string } }
	get(t, h, "/api/v1/idle/groups?from=-24h&group_by=gpu_model&node_label=pool=b", nil, &pool)
	if len(pool.Groups) != 1 || pool.Groups[0].Key != "H100" {
		t.Errorf("pool=b by GPU model = %+v, want H100 only", pool.Groups)
	}

	var hm struct {
		Buckets []time.Time
		Nodes   []struct{ Node string }
	}
	get(t, h, "/api/v1/idle/heatmap?from=-24h", nil, &hm)
	if len(hm.Buckets) != 24 || len(hm.Nodes) != 4 {
		t.Errorf("heatmap: %d buckets x %d nodes, want 24 x 4", len(hm.Buckets), len(hm.Nodes))
	}
	var holders struct {
		Holders []struct {
			Name string
			Idle float64 `json:"idle_gpu_hours"`
		}
	}
	get(t, h, "/api/v1/idle/holders?from=-24h&limit=100", nil, &holders)
	for i := 1; i < len(holders.Holders); i++ {
		if holders.Holders[i].Idle > holders.Holders[i-1].Idle {
			t.Errorf("holders not ranked by idle GPU-hours: %+v", holders.Holders)
		}
	}

	var story struct {
		UID       string
		Breakdown []struct {
			Category string
			Seconds  float64
		}
		Timeline []struct{ Label string }
		Members  []struct{ Name string }
	}
	if code := get(t, h, "/api/v1/why?q="+hist.Gated.Namespace+"/"+hist.Gated.Name, nil, &story); code != 200 || story.UID != hist.Gated.UID {
		t.Fatalf("why %s/%s = %d %+v", hist.Gated.Namespace, hist.Gated.Name, code, story)
	}
	bd, err := st.PodWaitBreakdown(ctx, hist.Gated.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(story.Breakdown) != len(bd) {
		t.Errorf("breakdown %+v, database %v", story.Breakdown, bd)
	}
	for _, b := range story.Breakdown {
		if math.Abs(b.Seconds-bd[b.Category]) > 1e-6 {
			t.Errorf("breakdown %s = %v s, database %v s", b.Category, b.Seconds, bd[b.Category])
		}
	}
	labels := ""
	for _, iv := range story.Timeline {
		labels += iv.Label + "\n"
	}
	for _, want := range []string{"gang incomplete: 1/2 members", "nodes lack free nvidia.com/gpu", "running on "} {
		if !strings.Contains(labels, want) {
			t.Errorf("timeline labels lack %q:\n%s", want, labels)
		}
	}
	if code := get(t, h, "/api/v1/why/jobs/"+hist.GangJob.UID, nil, &story); code != 200 || len(story.Members) != 2 {
		t.Errorf("job story = %d, %d members; want 200 with 2", code, len(story.Members))
	}

	// kind narrows a search to pods or to jobs; without it both answer.
	q := "/api/v1/search?q=" + hist.GangJob.Namespace + "/" + hist.GangJob.Name
	for kind, want := range map[string][]string{"": {"job", "pod"}, "job": {"job"}, "pod": {"pod"}} {
		var found struct{ Results []struct{ Kind, Name string } }
		if code := get(t, h, q+"&kind="+kind, nil, &found); code != 200 {
			t.Fatalf("search kind=%q: %d", kind, code)
		}
		kinds := map[string]bool{}
		for _, r := range found.Results {
			kinds[r.Kind] = true
		}
		if len(kinds) != len(want) {
			t.Errorf("search %s kind=%q found kinds %v, want %v", hist.GangJob.Name, kind, kinds, want)
		}
		for _, k := range want {
			if !kinds[k] {
				t.Errorf("search %s kind=%q found kinds %v, want %v", hist.GangJob.Name, kind, kinds, want)
			}
		}
	}

	// An eviction of the gated pod is shown where its wait is, with its cause.
	evicted := schedloop.Preemption{VictimUID: hist.Gated.UID, Namespace: hist.Gated.Namespace, VictimPod: hist.Gated.Name,
		VictimJob: hist.Gated.Namespace + "/" + hist.Gated.Name, Preemptor: hist.Gated.Namespace + "/urgent", PreemptorPriority: 1000,
		Node: "n1", GPUHours: 2.5, At: hist.Gated.Created.Add(time.Minute)}
	if err := st.UpsertPreemptions(ctx, []schedloop.Preemption{evicted}); err != nil {
		t.Fatal(err)
	}
	var withPreemption struct {
		Preemptions []struct {
			Role, Pod, Job, Preemptor, Node string
			Priority                        int32   `json:"preemptor_priority"`
			GPUHours                        float64 `json:"gpu_hours_lost"`
		}
	}
	get(t, h, "/api/v1/why/pods/"+hist.Gated.UID, nil, &withPreemption)
	if ps := withPreemption.Preemptions; len(ps) != 1 || ps[0].Role != "victim" || ps[0].Preemptor != evicted.Preemptor ||
		ps[0].Priority != 1000 || ps[0].GPUHours != 2.5 || ps[0].Node != "n1" {
		t.Errorf("why of an evicted pod: preemptions %+v, want its eviction for %s", ps, evicted.Preemptor)
	}

	var profiles struct {
		Profiles []struct {
			ID                 int64
			Name, Seed, Verify string
			Prediction         *struct {
				Jobs     int
				Spearman float64
				Within2x float64 `json:"within_2x"`
			}
		}
		Next string `json:"next_cursor"`
	}
	get(t, h, "/api/v1/profiles?limit=2", nil, &profiles)
	if len(profiles.Profiles) != 2 || profiles.Next == "" {
		t.Fatalf("first profile page = %+v", profiles)
	}
	for _, p := range profiles.Profiles {
		if seeded := p.Name == "tuned-002"; seeded != (p.Seed == "42") || seeded != (p.Verify == "tuner verify tuned-002") {
			t.Errorf("profile %s: seed %q, verify %q; want them only from seeded evidence", p.Name, p.Seed, p.Verify)
		}
		// The predictor's held-out accuracy comes from the evidence, and
		// only where the evidence measured it.
		switch pr := p.Prediction; {
		case p.Name == "tuned-002" && (pr == nil || pr.Jobs != 120 || pr.Spearman != 0.71 || pr.Within2x != 0.64):
			t.Errorf("profile %s prediction %+v, want 120 jobs, Spearman 0.71, 0.64 within 2x", p.Name, pr)
		case p.Name != "tuned-002" && pr != nil:
			t.Errorf("profile %s prediction %+v, want none (its evidence has none)", p.Name, pr)
		}
	}
	get(t, h, "/api/v1/profiles?limit=2&cursor="+profiles.Next, nil, &profiles)
	if len(profiles.Profiles) != 1 || profiles.Profiles[0].ID != hist.Profiles[0] || profiles.Next != "" {
		t.Errorf("second profile page = %+v, want the oldest only", profiles)
	}
	var d struct{ Changes []string }
	get(t, h, "/api/v1/profiles/diff?a=1&b=3", nil, &d)
	if len(d.Changes) == 0 || !strings.Contains(strings.Join(d.Changes, "\n"), "weights.binpack: 1 -> 1.5") {
		t.Errorf("diff 1 -> 3 = %v", d.Changes)
	}
}

func TestAPIRefusesBadRequestsAndGuardsAccess(t *testing.T) {
	st := storetest.New(t)
	open := api.NewRouter(st, api.Options{})
	for path, want := range map[string]string{
		"/api/v1/idle?from=yesterday":             `parameter from: \"yesterday\"`,
		"/api/v1/idle/groups?group_by=pods":       `parameter group_by: \"pods\"`,
		"/api/v1/idle/groups?cursor=c2wxOmtub2Rl": `parameter cursor`,
		"/api/v1/search?q=%27%3B":                 `parameter q`,
		"/api/v1/profiles/abc":                    `parameter id: \"abc\"`,
		"/api/v1/profiles?status=maybe":           `parameter status: \"maybe\"`,
		"/api/v1/wait/reasons?node=n1":            `parameter node`,
	} {
		rec := httptest.NewRecorder()
		open.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("GET %s = %d %s, want 400 naming %s", path, rec.Code, rec.Body.String(), want)
		}
	}
	var e struct{ Error string }
	if code := get(t, open, "/api/v1/why?q=nobody", nil, &e); code != 404 {
		t.Errorf("why of nobody = %d %q, want 404", code, e.Error)
	}
	rec := httptest.NewRecorder()
	open.ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, "/api/v1/profiles/1", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE = %d, want 405 (read-only)", rec.Code)
	}

	// httptest requests come from 192.0.2.1: the proxy header is believed
	// from there only when that address is a trusted proxy.
	proxy := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	elsewhere := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		proxies []netip.Prefix
		header  map[string]string
		want    int
	}{
		{proxy, nil, 401},
		{proxy, map[string]string{"Authorization": "Bearer wrong"}, 401},
		{proxy, map[string]string{"Authorization": "Bearer s3cret"}, 200},
		{proxy, map[string]string{"Authorization": "bearer s3cret"}, 200},
		{proxy, map[string]string{"X-Forwarded-User": "alice"}, 200},
		{elsewhere, map[string]string{"X-Forwarded-User": "alice"}, 401},
		{nil, map[string]string{"X-Forwarded-User": "alice"}, 401},
	} {
		guarded := api.NewRouter(st, api.Options{Token: "s3cret", AuthHeader: "X-Forwarded-User", TrustedProxies: tc.proxies})
		if code := get(t, guarded, "/api/v1/profiles", tc.header, nil); code != tc.want {
			t.Errorf("proxies %v, headers %v: %d, want %d", tc.proxies, tc.header, code, tc.want)
		}
	}
}
