// Package collector is the collector's engine room: it moves GPU samples from
// a telemetry source into Postgres through a bounded buffer (with an on-disk
// spool for when Postgres is away), rolls raw samples up into the minute,
// demand and idle-state tables for closed time ranges, and exports its own
// health and the derived idle gauges as Prometheus metrics.
//
// It does not parse telemetry (internal/dcgm does), watch the apiserver
// (internal/events does) or build SQL (internal/store does). Every goroutine
// it starts is owned by a Run method that returns when its context ends.
package collector
