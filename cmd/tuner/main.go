// Command tuner learns scheduler parameters from a cluster's history and
// publishes them as profiles, with the evidence that chose them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/cli"
	"github.com/schedloop/schedloop/internal/dbflags"
)

func main() { cli.Main("tuner", run) }

const usage = `tuner derives scheduler profiles (score weights, queue limits, gang timeout) from history.

Usage:
  tuner run [flags]           replay history under candidate profiles, propose the best, publish it if the guardrails allow
  tuner loop [flags]          run periodically while holding a leader Lease; measure applied profiles and roll back regressions
  tuner explain <profile>     what a stored profile changed and why, with the numbers
  tuner verify <profile>      replay a stored profile's recorded inputs and seed; compare the figures with the stored ones
  tuner import [flags]        load a public trace (openb, Philly, job CSV/YAML) and its inventory into the database
  tuner fgd-table [flags]     reproduce the FGD paper's allocation experiment on the openb traces
  tuner helios-table [flags]  reproduce the Helios queueing experiment on Philly, beside schedloop's order policies
  tuner eta-backtest [flags]  measure the wait estimates on the Helios experiment's window: error and interval coverage
  tuner profiles [flags]      list stored profiles, newest first, with their status
  tuner help                  show this text

Run "tuner <command> -h" for a command's flags.
`

var run = cli.Subcommands(usage, map[string]cli.RunFunc{
	"profiles":     runProfiles,
	"run":          runRun,
	"loop":         runLoop,
	"explain":      runExplain,
	"verify":       runVerify,
	"import":       runImport,
	"fgd-table":    runFGDTable,
	"helios-table": runHeliosTable,
	"eta-backtest": runETABacktest,
})

var statuses = []schedloop.ProfileStatus{schedloop.ProfileProposed, schedloop.ProfileApplied,
	schedloop.ProfileRolledBack, schedloop.ProfileRejected, schedloop.ProfileSuperseded}

func runProfiles(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tuner profiles", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := dbflags.Register(fs, getenv)
	status := fs.String("status", "", fmt.Sprintf("only profiles with this status (one of %v); empty lists all", statuses))
	limit := fs.Int("limit", 20, "at most this many profiles")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *status != "" && !validStatus(*status) {
		return fmt.Errorf("flag -status: %q is not a profile status (want one of %v)", *status, statuses)
	}
	if *limit <= 0 {
		return fmt.Errorf("flag -limit: %d must be positive", *limit)
	}
	s, err := db.Open(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	profiles, err := s.ListProfiles(ctx, schedloop.ProfileStatus(*status), *limit)
	if err != nil {
		return err
	}
	if len(profiles) == 0 {
		fmt.Fprintln(stdout, "no profiles stored yet")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tCREATED\tAPPLIED\tREASON")
	for _, p := range profiles {
		applied := "-"
		if !p.Applied.IsZero() {
			applied = p.Applied.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Name, p.Status, p.Created.Format(time.RFC3339), applied, p.Reason)
	}
	return tw.Flush()
}

func validStatus(s string) bool {
	for _, st := range statuses {
		if string(st) == s {
			return true
		}
	}
	return false
}
