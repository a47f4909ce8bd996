package collector

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names follow schedloop_<subsystem>_<name>_<unit>.
const (
	namespace = "schedloop"
	subsystem = "collector"
)

// Drop reasons, the label of samples_dropped_total.
const (
	DropBufferFull = "buffer_full" // memory buffer and spool both full
	DropInvalid    = "invalid"     // no timestamp or GPU UUID
	DropRejected   = "rejected"    // Postgres refused the sample for its content
	DropTimeRange  = "time_range"  // stamped too far before or after the ingester's clock
	DropShutdown   = "shutdown"    // still buffered at exit with no spool room
	DropSpoolRead  = "spool_corrupt"
)

// Metrics are the ingest pipeline's own counters and gauges.
type Metrics struct {
	Received      prometheus.Counter
	Written       prometheus.Counter
	Dropped       *prometheus.CounterVec
	WriteErrors   prometheus.Counter
	WriteDuration prometheus.Histogram
	LastWrite     prometheus.Gauge
	Spooled       prometheus.Counter
	Duplicates    prometheus.Counter

	Leader prometheus.Gauge

	RollupRuns   prometheus.Counter
	RollupErrors prometheus.Counter
	RollupUpTo   prometheus.Gauge

	NodeIdleShare      *prometheus.GaugeVec
	NamespaceIdleShare *prometheus.GaugeVec
	StateSeconds       *prometheus.GaugeVec
}

// NewMetrics returns unregistered metrics; Collectors lists them.
func NewMetrics() *Metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help})
	}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help})
	}
	m := &Metrics{
		Received: c("samples_received_total", "GPU samples handed to the ingest buffer."),
		Written:  c("samples_written_total", "GPU samples stored in Postgres."),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "samples_dropped_total",
			Help: "GPU samples given up on, by reason: buffer_full (memory and spool full), invalid, rejected (by Postgres), shutdown, spool_corrupt."},
			[]string{"reason"}),
		WriteErrors: c("write_errors_total", "Failed COPY batches (each is retried with backoff unless rejected for its content)."),
		WriteDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "write_duration_seconds", Help: "Duration of one successful COPY batch.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}),
		LastWrite: g("last_write_timestamp_seconds", "Unix time of the last successful COPY."),
		Spooled:   c("samples_spooled_total", "GPU samples written to the on-disk spool because the memory buffer was full."),
		Duplicates: c("duplicate_samples_total",
			"GPU samples of batches sent again and found already stored by their id (the connection dropped after COMMIT, or a crash came between a spooled batch's COPY and its file's removal); not stored twice."),

		Leader: g("leader", "1 while this replica is the active collector (holds the Lease, or runs without leader election) and scrapes telemetry; 0 on a standby."),

		RollupRuns:   c("rollups_total", "Rollup passes (minutes, demand, states) over closed time ranges."),
		RollupErrors: c("rollup_errors_total", "Rollup passes that failed; the range is retried on the next pass."),
		RollupUpTo:   g("rollup_up_to_timestamp_seconds", "End (exclusive, Unix time) of the last range rolled up."),

		NodeIdleShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "gpu", Name: "node_idle_share",
			Help: "Share of a node's GPU-minutes over the last hour rolled up that were allocated but idle or unallocated while GPU demand waited."},
			[]string{"node"}),
		NamespaceIdleShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "gpu", Name: "namespace_idle_share",
			Help: "Share of the GPU-minutes a namespace held over the last hour rolled up in which the GPU was below the activity threshold."},
			[]string{"namespace"}),
		StateSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: "gpu", Name: "state_seconds",
			Help: "GPU time in seconds per state (busy, allocated_idle, unallocated_waiting, spare) over the last hour rolled up."},
			[]string{"state"}),
	}
	for _, r := range []string{DropBufferFull, DropInvalid, DropRejected, DropTimeRange, DropShutdown, DropSpoolRead} {
		m.Dropped.WithLabelValues(r)
	}
	return m
}

// Collectors lists every metric for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Received, m.Written, m.Dropped, m.WriteErrors, m.WriteDuration, m.LastWrite,
		m.Spooled, m.Duplicates, m.Leader, m.RollupRuns, m.RollupErrors, m.RollupUpTo, m.NodeIdleShare, m.NamespaceIdleShare, m.StateSeconds}
}
