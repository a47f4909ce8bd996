package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/schedloop/schedloop/internal/dbflags"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/why"
)

func runWhy(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("collector why", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := dbflags.Register(fs, getenv)
	kind := fs.String("kind", "", "look only for a pod or only for a job (pod, job); default: either")
	asJSON := fs.Bool("json", false, "print the story as JSON (the API's /api/v1/why answer) instead of text")
	attempts := fs.Int("attempts", 20, "show at most this many scheduling attempts (the latest); 0 shows all")
	threshold := fs.Float64("idle-threshold", store.DefaultIdleThreshold, "engine activity (0..1) below which a held GPU counts as idle")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: collector why [flags] <namespace/pod | namespace/job | name | uid>

Prints how long a pod (or a gang job) waited, for which reasons, the timeline
from creation to finish, the scheduling attempts behind it and its GPU activity.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("why: want exactly one pod or job, got %d arguments", fs.NArg())
	}
	if *kind != "" && *kind != "pod" && *kind != "job" {
		return fmt.Errorf("why: flag -kind: %q is not pod or job", *kind)
	}
	s, err := store.Open(ctx, db.URL, store.Options{ConnectTimeout: db.ConnectTimeout})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.RequireCurrentSchema(ctx); err != nil {
		return err
	}
	b := why.Builder{Store: s, Threshold: *threshold, Now: time.Now}
	m, err := b.Resolve(ctx, fs.Arg(0), *kind)
	if err != nil {
		return fmt.Errorf("why: %w", err)
	}
	var st why.Story
	if m.Kind == "job" {
		st, err = b.Job(ctx, m.UID)
	} else {
		st, err = b.Pod(ctx, m.UID)
	}
	if err != nil {
		return fmt.Errorf("why %s: %w", fs.Arg(0), err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return st.WriteText(stdout, *attempts)
}
