package events_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/events"
	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/trace"
)

// The MIG instances NVIDIA's DRA driver publishes on a partitioned GPU are
// stored as inventory instances under it, by MIG UUID and profile, before
// any telemetry names them.
func TestWatchDRAMIGInstancesStored(t *testing.T) {
	c := harness.NewForTest(t, harness.Options{})
	ctx := t.Context()
	if _, err := c.AddNodes(ctx, []trace.Node{{Name: "n0", GPUs: 1, GPUModel: "NVIDIA-A100-SXM4-80GB",
		MIG: map[string]int{"nvidia.com/mig-1g.10gb": 3}}}, harness.NodeOptions{DRA: true, NoExporters: true}); err != nil {
		t.Fatal(err)
	}
	w, s := events.NewTestWatcher(t, c, events.WatchOptions{FlushInterval: 50 * time.Millisecond})
	defer runWatcher(ctx, t, w)()
	waitFor(t, "the slices' MIG instances stored", func(ctx context.Context) (bool, error) {
		gpus, err := s.ListGPUs(ctx, "n0")
		if err != nil {
			return false, err
		}
		instances := 0
		for _, g := range gpus {
			if g.MIGUUID == "" {
				continue
			}
			if !strings.HasPrefix(g.MIGUUID, "MIG-") || g.Instance != "" || g.MIGProfile != "1g.10gb" {
				t.Errorf("stored instance %+v; want a MIG- UUID, profile 1g.10gb and no instance id", g)
			}
			instances++
		}
		return instances == 3, nil
	})
}
