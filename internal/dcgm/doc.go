// Package dcgm is the collector's room for GPU telemetry: it reads per-GPU
// utilisation, memory and power from DCGM (go-dcgm, in-process or through
// nv-hostengine), from dcgm-exporter's /metrics pages, or from a Prometheus
// server that scraped them, and returns schedloop.GPUSample values. It also
// attributes GPUs to pods, from exporter labels or from the kubelet's
// pod-resources API.
//
// It must not store samples, aggregate them over time, or talk to the
// apiserver beyond discovering dcgm-exporter endpoints: the store and the
// events room own those. Every source is safe to run where DCGM is absent; the
// go-dcgm source then fails at start with an error that says what to install.
package dcgm

import (
	"context"

	"github.com/schedloop/schedloop"
)

// Source produces the latest reading of every GPU it can see. A source that
// reads several endpoints returns what it got together with an error naming
// the endpoints that failed: a non-nil error does not void the samples.
type Source interface {
	Collect(ctx context.Context) ([]schedloop.GPUSample, error)
}
