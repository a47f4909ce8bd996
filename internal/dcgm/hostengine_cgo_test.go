//go:build cgo

package dcgm

import (
	"errors"
	"strings"
	"testing"
)

// These run on machines without DCGM (CI, laptops); on a GPU node with DCGM
// installed, StartHostEngine succeeds and the test checks it can collect.
func TestStartHostEngineWithoutDCGM(t *testing.T) {
	for _, cfg := range []HostEngineConfig{
		{Mode: Embedded, Node: "node-1"},
		{Mode: Standalone, Address: "localhost:5555", Node: "node-1"},
	} {
		t.Run(cfg.Mode.String(), func(t *testing.T) {
			h, err := StartHostEngine(cfg)
			if err == nil {
				defer h.Close()
				if _, err := h.Collect(t.Context()); err != nil {
					t.Errorf("DCGM is present but Collect failed: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrDCGMNotInstalled) {
				t.Fatalf("error %v does not wrap ErrDCGMNotInstalled", err)
			}
			want := "start DCGM (" + cfg.Mode.String() + " mode): DCGM is not installed on this node (libdcgm.so.4 not found): install datacenter-gpu-manager or use --dcgm-exporter-url to scrape dcgm-exporter instead"
			if err.Error() != want {
				t.Errorf("error\n got %q\nwant %q", err, want)
			}
			if !strings.Contains(err.Error(), ExporterFlagHint) {
				t.Errorf("error %q does not point to %s", err, ExporterFlagHint)
			}
		})
	}
}
