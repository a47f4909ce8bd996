package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/tuner"
	"github.com/schedloop/schedloop/internal/tuner/lifecycle"
)

func runVerify(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newReportCommand("verify", "verify", "\n"+
		"Reads the inputs the profile's evidence names (the stored history window or the job and node files),\n"+
		"replays them with the recorded seed and settings, and prints the stored and recomputed figures side\n"+
		"by side. Exits non-zero when any figure, the proposal or the decision differs.\n\n", getenv, stderr)
	fs, db := c.fs, c.db
	if err := fs.Parse(args); err != nil {
		return err
	}
	var (
		rep  tuner.Report
		what string
		s    *store.Store
	)
	openDB := func() error {
		if s != nil {
			return nil
		}
		var err error
		s, err = db.Open(ctx, stderr)
		return err
	}
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	switch {
	case *c.reportPath != "":
		if fs.NArg() != 0 {
			return fmt.Errorf("unexpected argument %q with -report", fs.Arg(0))
		}
		var err error
		if rep, err = c.readFile(); err != nil {
			return err
		}
		what = "report " + *c.reportPath
	case fs.NArg() == 1:
		if err := openDB(); err != nil {
			return err
		}
		p, err := lookupProfile(ctx, s, fs.Arg(0))
		if err != nil {
			return err
		}
		if len(p.Evidence) == 0 {
			return fmt.Errorf("profile %s has no tuning evidence to verify (it was not computed by the tuner)", p.Name)
		}
		if rep, err = tuner.ReportFromEvidence(p.Evidence); err != nil {
			return err
		}
		what = "profile " + p.Name
	default:
		fs.Usage()
		return errors.New("verify needs one profile name or id, or -report")
	}
	src := rep.Inputs.Source
	if src.JobsFile == "" || src.NodesFile == "" {
		if err := openDB(); err != nil {
			return err
		}
	}
	w, err := lifecycle.Load(ctx, s, src)
	if err != nil {
		return fmt.Errorf("%s: read its inputs again: %w", what, err)
	}
	in, err := tuner.InputFromReport(rep, w)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	v, err := tuner.Verify(ctx, rep, in)
	if err != nil {
		return err
	}
	if err := v.Write(stdout); err != nil {
		return err
	}
	if !v.Matches() {
		d := v.Differing()
		if len(d) > 5 {
			d = append(d[:5], fmt.Sprintf("and %d more", len(d)-5))
		}
		return fmt.Errorf("%s does not verify: recomputed differently: %s", what, strings.Join(d, ", "))
	}
	return nil
}
