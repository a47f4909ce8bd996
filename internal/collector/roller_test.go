package collector_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// A roller pass alone fills what the dashboard reads: its GPU usage adds
// up to the idle breakdown of the same hours, and the holder of the idle
// GPU-minutes is named.
func TestRollerPassFillsTheDashboard(t *testing.T) {
	ctx := t.Context()
	s := storetest.New(t)
	m0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var samples []schedloop.GPUSample
	for i := 0; i < 90; i++ { // two GPUs, one held by p1 (idle every third minute), one free
		active := 0.8
		if i%3 == 0 {
			active = 0.01
		}
		at := m0.Add(time.Duration(i) * time.Minute)
		samples = append(samples,
			schedloop.GPUSample{Time: at, GPUUUID: "GPU-a", Node: "n1", PodNamespace: "ml", PodName: "p1", GrEngineActive: active},
			schedloop.GPUSample{Time: at, GPUUUID: "GPU-b", Node: "n1"})
	}
	if _, err := s.CopyGPUSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertPods(ctx, []schedloop.Pod{
		{UID: "p1", Namespace: "ml", Name: "p1", Queue: "research", GPUs: 1, Created: m0.Add(-time.Hour), Scheduled: m0},
		{UID: "p2", Namespace: "ml", Name: "p2", Queue: "research", GPUs: 1, Created: m0.Add(30 * time.Minute)},
	}); err != nil {
		t.Fatal(err)
	}
	r := &collector.Roller{Store: s, Lookback: 3 * time.Hour, Now: func() time.Time { return m0.Add(2 * time.Hour) }}
	if err := r.Once(ctx); err != nil {
		t.Fatal(err)
	}

	from, to := m0, m0.Add(2*time.Hour)
	want, err := s.GPUIdleBreakdown(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if want.Total() != 180 || want.AllocatedIdleMinutes != 30 || want.UnallocatedWaitingMinutes != 60 {
		t.Fatalf("idle breakdown %+v: want 180 GPU-minutes, 30 allocated idle, 60 unallocated while p2 waited", want)
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
			t.Errorf("resolution %v: dashboard usage %+v after a roller pass; the idle breakdown says %+v", res, got, want)
		}
	}
	holders, err := s.IdleHolders(ctx, store.UsageFilter{From: from, To: to}, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(holders) != 1 || holders[0].Name != "p1" || holders[0].Queue != "research" ||
		holders[0].IdleMinutes != want.AllocatedIdleMinutes || holders[0].BusyMinutes != want.BusyMinutes {
		t.Errorf("idle holders %+v after a roller pass; want p1 of queue research with the breakdown's %d idle and %d busy minutes",
			holders, want.AllocatedIdleMinutes, want.BusyMinutes)
	}
	reasons, err := s.WaitReasonTotals(ctx, store.WaitFilter{From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	if len(reasons) == 0 {
		t.Error("no wait reasons after a roller pass; p2 waited")
	}
}

// gpuLog records what an Inventory writes.
type gpuLog struct {
	mu      sync.Mutex
	batches [][]schedloop.GPU
}

func (l *gpuLog) RecordGPUs(_ context.Context, gpus []schedloop.GPU) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches = append(l.batches, slices.Clone(gpus))
	return nil
}

func TestInventoryWritesOnlyWhatChanged(t *testing.T) {
	log := &gpuLog{}
	inv := &collector.Inventory{Store: log}
	a := schedloop.GPU{UUID: "GPU-a", Node: "n1", Index: 0, Model: "NVIDIA H100 80GB HBM3"}
	b := schedloop.GPU{UUID: "GPU-b", Node: "n1", Index: 1, Model: "NVIDIA H100 80GB HBM3"}
	flush := func() []schedloop.GPU {
		t.Helper()
		n := len(log.batches)
		if err := inv.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(log.batches) == n {
			return nil
		}
		got := log.batches[len(log.batches)-1]
		slices.SortFunc(got, func(x, y schedloop.GPU) int { return strings.Compare(x.UUID, y.UUID) })
		return got
	}
	inv.Observe([]schedloop.GPU{a, b})
	if got := flush(); !slices.Equal(got, []schedloop.GPU{a, b}) {
		t.Fatalf("first write %v, want both GPUs", got)
	}
	inv.Observe([]schedloop.GPU{a, b})
	if got := flush(); got != nil {
		t.Errorf("wrote %v for GPUs already stored", got)
	}
	moved := b
	moved.Node = "n2"
	inv.Observe([]schedloop.GPU{a, moved})
	if got := flush(); !slices.Equal(got, []schedloop.GPU{moved}) {
		t.Errorf("after GPU-b moved, wrote %v, want only it", got)
	}
}
