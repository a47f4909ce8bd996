//go:build !cgo

package dcgm

import (
	"errors"
	"testing"
)

func TestStartHostEngineWithoutCgo(t *testing.T) {
	_, err := StartHostEngine(HostEngineConfig{Mode: Embedded})
	if !errors.Is(err, ErrBuiltWithoutCgo) {
		t.Fatalf("error %v does not wrap ErrBuiltWithoutCgo", err)
	}
	want := "start DCGM (embedded mode): built without cgo (CGO_ENABLED=0), so go-dcgm is not linked in: rebuild with CGO_ENABLED=1 or use --dcgm-exporter-url to scrape dcgm-exporter instead"
	if err.Error() != want {
		t.Errorf("error\n got %q\nwant %q", err, want)
	}
}
