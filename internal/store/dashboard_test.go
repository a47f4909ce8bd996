package store_test

import (
	"math"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
)

func TestDashboardRollupsAgreeWithStates(t *testing.T) {
	s := storeWithNode(t)
	m0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	m := func(i int) time.Time { return m0.Add(time.Duration(i) * time.Minute) }
	var samples []schedloop.GPUSample
	for i := 0; i < 90; i++ { // 90 minutes: spans two hours
		active := 0.9
		if i%3 == 2 {
			active = 0.01
		}
		samples = append(samples,
			schedloop.GPUSample{Time: m(i), GPUUUID: "GPU-a", Node: "n1", PodNamespace: "ml", PodName: "p1", GrEngineActive: active},
			schedloop.GPUSample{Time: m(i), GPUUUID: "GPU-b", Node: "n1"},
			schedloop.GPUSample{Time: m(i), GPUUUID: "GPU-c", Node: "n1"})
	}
	if _, err := s.CopyGPUSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	pods := []schedloop.Pod{
		{UID: "p1", Namespace: "ml", Name: "p1", JobUID: "j1", Queue: "research", GPUs: 1, Created: m(-60), Scheduled: m(-30)},
		{UID: "p2", Namespace: "ml", Name: "p2", Queue: "research", GPUs: 1, Created: m(10), Scheduled: m(80)},
	}
	if err := s.UpsertPods(ctx, pods); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertJobs(ctx, []schedloop.Job{{UID: "j1", Namespace: "ml", Name: "train", Kind: schedloop.JobKindGang, Created: m(-60)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertAttempts(ctx, []schedloop.SchedulingAttempt{
		{Key: "a1", PodUID: "p2", At: m(20), Result: schedloop.AttemptUnschedulable, Category: schedloop.WaitInsufficientGPU,
			TotalNodes: 1, Reasons: map[string]int{"Insufficient nvidia.com/gpu": 1}},
		{Key: "a2", PodUID: "p2", At: m(55), Result: schedloop.AttemptWaiting, Category: schedloop.WaitQueueLimit},
	}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // twice: rollups are idempotent
		if _, err := s.RollupGPUMinutes(ctx, m(0), m(90)); err != nil {
			t.Fatal(err)
		}
		if err := s.RollupDemand(ctx, m(0), m(90)); err != nil {
			t.Fatal(err)
		}
		if err := s.RollupStates(ctx, m(0), m(90), store.DefaultIdleThreshold); err != nil {
			t.Fatal(err)
		}
		if err := s.RollupDashboard(ctx, m(0), m(90), store.DefaultIdleThreshold); err != nil {
			t.Fatal(err)
		}
	}
	from, to := m0, m0.Add(2*time.Hour)
	want, err := s.GPUIdleBreakdown(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range []store.Resolution{store.Hourly, store.Daily} {
		f, tt := res.Align(from, to)
		series, err := s.UsageSeries(ctx, store.UsageFilter{From: f, To: tt}, res)
		if err != nil {
			t.Fatal(err)
		}
		var got store.UsageMinutes
		for _, p := range series {
			got.Busy += p.Busy
			got.AllocatedIdle += p.AllocatedIdle
			got.UnallocatedWaiting += p.UnallocatedWaiting
			got.Spare += p.Spare
		}
		if got.Busy != want.BusyMinutes || got.AllocatedIdle != want.AllocatedIdleMinutes ||
			got.UnallocatedWaiting != want.UnallocatedWaitingMinutes || got.Spare != want.SpareMinutes {
			t.Errorf("resolution %v: series adds up to %+v, states say %+v", res, got, want)
		}
		if got.Total() != 270 || got.AllocatedIdle != 30 {
			t.Errorf("resolution %v: total %d (want 270 GPU-minutes), allocated idle %d (want 30)", res, got.Total(), got.AllocatedIdle)
		}
	}

	groups, err := s.UsageByGroup(ctx, store.UsageFilter{From: from, To: to, Queues: []string{"research"}}, store.Hourly, store.ByQueue, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Key != "research" || groups[0].Busy != 60 || groups[0].AllocatedIdle != 30 {
		t.Errorf("by queue research = %+v, want busy 60 and idle 30", groups)
	}
	labelled, err := s.UsageByGroup(ctx, store.UsageFilter{From: from, To: to, NodeLabels: map[string]string{"pool": "none"}}, store.Hourly, store.ByNode, 10, 0)
	if err != nil || len(labelled) != 0 {
		t.Errorf("node label filter matching no node = %+v, %v; want nothing", labelled, err)
	}

	cells, err := s.UsageHeatmap(ctx, store.UsageFilter{From: from, To: to}, store.Hourly, "", 10)
	if err != nil || len(cells) != 2 || cells[0].Node != "n1" || cells[0].GPUModel != "A100" || cells[0].Total() != 180 {
		t.Errorf("heatmap = %+v, %v; want n1 with 180 GPU-minutes in the first hour", cells, err)
	}

	holders, err := s.IdleHolders(ctx, store.UsageFilter{From: from, To: to}, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(holders) != 1 || holders[0].Name != "train" || holders[0].JobUID != "j1" || holders[0].IdleMinutes != 30 || holders[0].BusyMinutes != 60 {
		t.Errorf("idle holders = %+v, want job train with 30 idle and 60 busy minutes", holders)
	}

	breakdown, err := s.PodWaitBreakdown(ctx, "p2")
	if err != nil {
		t.Fatal(err)
	}
	totals, err := s.WaitReasonTotals(ctx, store.WaitFilter{From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	if len(totals) != len(breakdown) {
		t.Fatalf("reason totals %+v, pod breakdown %v: want the same categories", totals, breakdown)
	}
	for _, rt := range totals {
		if math.Abs(rt.Seconds-breakdown[rt.Category]) > 1e-6 {
			t.Errorf("reason %s: %v s in the hourly rollup, %v s in the pod's breakdown", rt.Category, rt.Seconds, breakdown[rt.Category])
		}
	}
	series, err := s.WaitReasonSeries(ctx, store.WaitFilter{From: from, To: to, Queues: []string{"research"}}, store.Hourly)
	if err != nil || len(series) != 2 || series[0].Seconds["insufficient_gpu"] != 35*60 || series[1].Seconds["queue_limit"] != 20*60 {
		t.Errorf("wait series = %+v, %v; want 35 min insufficient GPU in hour 1 and 20 min queue limit in hour 2", series, err)
	}

	found, err := s.FindWorkloads(ctx, "ml/p", "", 10)
	if err != nil || len(found) != 2 || found[0].UID != "p1" || found[1].UID != "p2" {
		t.Errorf("search ml/p = %+v, %v; want pods p1 and p2", found, err)
	}
	if next, err := s.FindWorkloads(ctx, "ml/p", found[0].SortKey(), 10); err != nil || len(next) != 1 || next[0].UID != "p2" {
		t.Errorf("second page of ml/p = %+v, %v; want p2", next, err)
	}
	if jobs, err := s.FindWorkloads(ctx, "tra", "", 10); err != nil || len(jobs) != 1 || jobs[0].Kind != "job" {
		t.Errorf("search tra = %+v, %v; want job train", jobs, err)
	}
	if none, err := s.FindWorkloads(ctx, "%", "", 10); err != nil || len(none) != 0 {
		t.Errorf("search %% = %+v, %v; want a literal match only (nothing)", none, err)
	}
	act, err := s.PodGPUActivity(ctx, "ml", []string{"p1"}, m(0), m(90), 30*time.Minute, store.DefaultIdleThreshold)
	if err != nil || len(act) != 3 || act[0].GPUs != 1 || act[0].IdleMinutes != 10 {
		t.Errorf("activity = %+v, %v; want 3 half-hour buckets of 1 GPU with 10 idle minutes each", act, err)
	}
}
