// Command demo runs schedloop's whole loop on one machine: an in-process
// Kubernetes cluster with simulated GPU nodes and dcgm-exporters, the
// schedloop scheduler, the collector pipeline with the dashboard, and the
// tuner. It replays a slice of a public trace under the default profile,
// lets the tuner learn and publish a profile from what the collector stored,
// waits for the scheduler to reload it, replays the same slice again, and
// prints before/after figures read back from Postgres.
//
// It only wires existing packages together; every decision is theirs.
package main

import "github.com/schedloop/schedloop/internal/cli"

func main() { cli.Main("demo", run) }
