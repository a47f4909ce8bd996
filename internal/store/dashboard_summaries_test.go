package store_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/api/apitest"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// The summaries of migration 00006 each drop a dimension of the table they
// are summed from. Every request must get the same answer whichever table
// its filters pick, and holders the same from days as from hours.
func TestDashboardSummariesAnswerLikeTheirSources(t *testing.T) {
	s := storetest.New(t)
	end := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	h, err := apitest.Fill(ctx, s, 3, end, 30) // 30 hours over two days
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range h.Nodes {
		nodes = append(nodes, n.Name)
	}
	// Filters that keep everything but force a table: none (tenant
	// summary), every node (node summary), every node and namespace (full).
	namespaces := []string{"", "research", "prod"}
	forced := map[string]store.UsageFilter{
		"tenant": {},
		"node":   {Nodes: nodes},
		"full":   {Nodes: nodes, Namespaces: namespaces},
	}
	for _, res := range []store.Resolution{store.Hourly, store.Daily} {
		from, to := res.Align(h.From, h.To)
		answers := map[string]string{}
		for name, f := range forced {
			f.From, f.To = from, to
			series, err := s.UsageSeries(ctx, f, res)
			if err != nil {
				t.Fatal(err)
			}
			out := fmt.Sprint(series)
			for _, dim := range []store.Dimension{store.ByCluster, store.ByGPUModel} {
				groups, err := s.UsageByGroup(ctx, f, res, dim, 50, 0)
				if err != nil {
					t.Fatal(err)
				}
				out += fmt.Sprint(dim, groups)
			}
			answers[name] = out
		}
		if answers["tenant"] != answers["full"] || answers["node"] != answers["full"] {
			t.Errorf("resolution %v: answers differ by table:\ntenant %s\nnode   %s\nfull   %s", res,
				answers["tenant"], answers["node"], answers["full"])
		}
		// By node: node summary vs full table; by namespace: tenant vs full.
		for _, c := range []struct {
			dim          store.Dimension
			small, force store.UsageFilter
		}{
			{store.ByNode, store.UsageFilter{}, store.UsageFilter{Namespaces: namespaces}},
			{store.ByNamespace, store.UsageFilter{}, store.UsageFilter{Nodes: nodes}},
			{store.ByQueue, store.UsageFilter{}, store.UsageFilter{Nodes: nodes}},
		} {
			c.small.From, c.small.To, c.force.From, c.force.To = from, to, from, to
			a, err := s.UsageByGroup(ctx, c.small, res, c.dim, 50, 0)
			if err != nil {
				t.Fatal(err)
			}
			b, err := s.UsageByGroup(ctx, c.force, res, c.dim, 50, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(a) == 0 || !reflect.DeepEqual(a, b) {
				t.Errorf("resolution %v by %s: summary gives %+v, full table %+v", res, c.dim, a, b)
			}
		}
		heatSmall, err := s.UsageHeatmap(ctx, store.UsageFilter{From: from, To: to}, res, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		heatFull, err := s.UsageHeatmap(ctx, store.UsageFilter{From: from, To: to, Namespaces: namespaces}, res, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(heatSmall) == 0 || !reflect.DeepEqual(heatSmall, heatFull) {
			t.Errorf("resolution %v heatmap: node summary %+v, full table %+v", res, heatSmall, heatFull)
		}
	}

	// Whole days read gpu_holder_days; one hour more (with no telemetry in
	// it) reads gpu_holder_hours.
	from, to := store.Daily.Align(h.From, h.To)
	for _, f := range []store.UsageFilter{{}, {Queues: []string{"research"}}, {Nodes: nodes[:1]}} {
		f.From, f.To = from, to
		days, err := s.IdleHolders(ctx, f, 50, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.To = to.Add(time.Hour)
		hours, err := s.IdleHolders(ctx, f, 50, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(days) == 0 || !reflect.DeepEqual(days, hours) {
			t.Errorf("filter %+v: holders from days %+v, from hours %+v", f, days, hours)
		}
	}
}
