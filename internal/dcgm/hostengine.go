package dcgm

import (
	"errors"
	"time"

	"github.com/schedloop/schedloop"
)

// HostEngineMode chooses how the go-dcgm source reaches DCGM.
type HostEngineMode int

const (
	// Embedded runs the DCGM host engine inside the collector process.
	Embedded HostEngineMode = iota
	// Standalone connects to a running nv-hostengine (the GPU Operator's, or
	// the datacenter-gpu-manager service).
	Standalone
)

func (m HostEngineMode) String() string {
	switch m {
	case Embedded:
		return "embedded"
	case Standalone:
		return "standalone"
	}
	return "unknown"
}

// HostEngineConfig configures the go-dcgm source.
type HostEngineConfig struct {
	Mode HostEngineMode
	// Address of nv-hostengine in Standalone mode: "host:port" (default
	// port 5555) or a unix socket path with UnixSocket set.
	Address    string
	UnixSocket bool
	// Node is written into every sample; DCGM does not know the Kubernetes
	// node name.
	Node string
	// UpdateInterval is how often DCGM refreshes the watched fields; it
	// defaults to DefaultUpdateInterval.
	UpdateInterval time.Duration
}

// DefaultUpdateInterval matches dcgm-exporter's default collection interval.
const DefaultUpdateInterval = 30 * time.Second

// ExporterFlagHint is the collector flag the errors below point users to, so
// a node without DCGM can still be monitored through dcgm-exporter.
const ExporterFlagHint = "--dcgm-exporter-url"

// ErrDCGMNotInstalled is returned (wrapped) by StartHostEngine when the DCGM
// library cannot be loaded on this node.
var ErrDCGMNotInstalled = errors.New("DCGM is not installed on this node")

// ErrBuiltWithoutCgo is returned (wrapped) by StartHostEngine in binaries
// built with CGO_ENABLED=0, where go-dcgm cannot be linked.
var ErrBuiltWithoutCgo = errors.New("built without cgo")

// InventoryReporter is a Source that can report the GPUs and MIG instances
// each Collect read, in the form the exporter scraper gives its pages'
// (ExporterScraper.Inventory), so both feed the inventory alike.
type InventoryReporter interface {
	SetInventory(func(gpus []schedloop.GPU))
}
