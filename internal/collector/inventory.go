package collector

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/schedloop/schedloop"
)

// GPURecorder stores the GPUs telemetry names; *store.Store is one.
type GPURecorder interface {
	RecordGPUs(ctx context.Context, gpus []schedloop.GPU) error
}

// Inventory keeps the gpus table in step with what the telemetry sources
// report: Observe (cheap, from the scrape goroutines) notes GPUs that are
// new or changed, Run writes them. A failed write is retried next pass.
type Inventory struct {
	Store GPURecorder
	// Every is the pause between writes; default 10s.
	Every  time.Duration
	Logger *slog.Logger

	mu      sync.RWMutex
	stored  map[deviceKey]schedloop.GPU // as last written
	pending map[deviceKey]schedloop.GPU
}

// deviceKey names a GPU or, with instance set, one of its MIG instances.
type deviceKey struct{ uuid, instance string }

func keyOf(g schedloop.GPU) deviceKey { return deviceKey{g.UUID, g.Instance} }

// Observe notes gpus; it never waits for the database.
func (inv *Inventory) Observe(gpus []schedloop.GPU) {
	// Every scrape worker reports every page, and a page almost always
	// names the GPUs it named last time: check that under the shared lock.
	inv.mu.RLock()
	known := true
	for _, g := range gpus {
		if old, ok := inv.stored[keyOf(g)]; !ok || old != g {
			known = false
			break
		}
	}
	inv.mu.RUnlock()
	if known {
		return
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for _, g := range gpus {
		if old, ok := inv.stored[keyOf(g)]; ok && old == g {
			continue
		}
		if inv.pending == nil {
			inv.pending = map[deviceKey]schedloop.GPU{}
		}
		inv.pending[keyOf(g)] = g
	}
}

// Flush writes what changed since the last successful write.
func (inv *Inventory) Flush(ctx context.Context) error {
	inv.mu.Lock()
	batch := make([]schedloop.GPU, 0, len(inv.pending))
	for _, g := range inv.pending {
		batch = append(batch, g)
	}
	inv.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	if err := inv.Store.RecordGPUs(ctx, batch); err != nil {
		return err
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.stored == nil {
		inv.stored = map[deviceKey]schedloop.GPU{}
	}
	for _, g := range batch {
		inv.stored[keyOf(g)] = g
		if inv.pending[keyOf(g)] == g {
			delete(inv.pending, keyOf(g))
		}
	}
	return nil
}

// Run flushes every Every until ctx ends, then once more.
func (inv *Inventory) Run(ctx context.Context) error {
	every := inv.Every
	if every <= 0 {
		every = 10 * time.Second
	}
	log := inv.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return inv.Flush(final)
		case <-t.C:
		}
		if err := inv.Flush(ctx); err != nil && ctx.Err() == nil {
			log.Warn("GPU inventory not stored; retried next pass", "err", err)
		}
	}
}
