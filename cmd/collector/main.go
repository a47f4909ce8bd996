// Command collector is the observability half of schedloop: it records GPU
// telemetry and the cluster's scheduling history in Postgres and serves the
// JSON API, the dashboard and its own /metrics.
package main

import (
	"fmt"
	"strconv"

	"github.com/schedloop/schedloop/internal/cli"
)

func main() { cli.Main("collector", run) }

const usage = `collector records what a GPU cluster did and why pods waited.

Usage:
  collector serve   [flags]          run the collector: telemetry, cluster events, rollups, dashboard, API, /metrics
  collector backfill [flags] -prometheus-url URL -from TIME
                                     load GPU telemetry a Prometheus server already scraped, then roll it up
  collector migrate [flags] up|down|status [version]
                                     manage the Postgres schema
  collector why     [flags] <namespace/pod | job | uid>
                                     why a pod or job waited: breakdown, timeline, attempts
  collector help                     show this text

Run "collector <command> -h" for a command's flags.
`

var run = cli.Subcommands(usage, map[string]cli.RunFunc{
	"serve":    runServe,
	"backfill": runBackfill,
	"migrate":  runMigrate,
	"why":      runWhy,
})

func parseVersion(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("version %q is not a migration number (0, 1, 2, ...)", s)
	}
	return v, nil
}
