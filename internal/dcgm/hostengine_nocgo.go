//go:build !cgo

package dcgm

import (
	"context"
	"fmt"

	"github.com/schedloop/schedloop"
)

// HostEngine is the go-dcgm source. This binary was built without cgo, so it
// cannot exist: StartHostEngine always fails.
type HostEngine struct{}

// StartHostEngine reports that go-dcgm is unavailable in a cgo-free build.
func StartHostEngine(cfg HostEngineConfig) (*HostEngine, error) {
	return nil, fmt.Errorf("start DCGM (%s mode): %w (CGO_ENABLED=0), so go-dcgm is not linked in: rebuild with CGO_ENABLED=1 or use %s to scrape dcgm-exporter instead",
		cfg.Mode, ErrBuiltWithoutCgo, ExporterFlagHint)
}

// Collect implements Source; it is never reached because StartHostEngine fails.
func (h *HostEngine) Collect(context.Context) ([]schedloop.GPUSample, error) {
	return nil, fmt.Errorf("collect from DCGM: %w", ErrBuiltWithoutCgo)
}

// Close does nothing.
func (h *HostEngine) Close() error { return nil }
