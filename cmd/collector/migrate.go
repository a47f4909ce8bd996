package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/schedloop/schedloop/internal/dbflags"
	"github.com/schedloop/schedloop/internal/store"
)

func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("collector migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := dbflags.Register(fs, getenv)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: collector migrate [flags] up|down|status [version]

  up              apply every pending migration (the services do this at start-up too)
  down [version]  roll back to version (default 0: drop schedloop's tables and their data)
  status          print the schema version and what is pending

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("migrate: missing action (up, down or status)")
	}
	s, err := store.Open(ctx, db.URL, store.Options{ConnectTimeout: db.ConnectTimeout})
	if err != nil {
		return err
	}
	defer s.Close()
	switch action := fs.Arg(0); action {
	case "up":
		st, err := s.Migrate(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schema at migration %d (latest %d)\n", st.Current, st.Latest)
	case "down":
		var target int64
		if fs.NArg() > 1 {
			if target, err = parseVersion(fs.Arg(1)); err != nil {
				return fmt.Errorf("migrate down: %w", err)
			}
		}
		st, err := s.MigrateDownTo(ctx, target)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schema rolled back to migration %d\n", st.Current)
	case "status":
		st, err := s.MigrationStatus(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schema at migration %d, binary knows up to %d, pending %v\n", st.Current, st.Latest, st.Pending)
	default:
		return fmt.Errorf("migrate: unknown action %q (want up, down or status)", action)
	}
	return nil
}
