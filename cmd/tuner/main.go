// Command tuner learns scheduler parameters from a cluster's history and
// publishes them as profiles, with the evidence that chose them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/dbflags"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tuner:", err)
		os.Exit(1)
	}
}

const usage = `tuner derives scheduler profiles (score weights, queue limits, gang timeout) from history.

Usage:
  tuner profiles [flags]      list stored profiles, newest first, with their status
  tuner help                  show this text

Run "tuner <command> -h" for a command's flags.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command")
	}
	switch args[0] {
	case "profiles":
		return runProfiles(ctx, args[1:], getenv, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return flag.ErrHelp
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

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
