package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/dbflags"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/tuner"
)

// reportCommand is the flag set of a command that reads one report: a
// stored profile's (the argument) or a `tuner run -report-out` file.
type reportCommand struct {
	fs         *flag.FlagSet
	db         *dbflags.Config
	reportPath *string
}

func newReportCommand(name, verb, about string, getenv func(string) string, stderr io.Writer) reportCommand {
	fs := flag.NewFlagSet("tuner "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := reportCommand{fs: fs, db: dbflags.Register(fs, getenv),
		reportPath: fs.String("report", "", verb+" a report written by `tuner run -report-out` instead of a stored profile")}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: tuner %s [flags] <profile name or id>\n%s", name, about)
		fs.PrintDefaults()
	}
	return c
}

// readFile reads the -report file.
func (c reportCommand) readFile() (tuner.Report, error) {
	var r tuner.Report
	data, err := os.ReadFile(*c.reportPath)
	if err != nil {
		return r, fmt.Errorf("flag -report: %w", err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("flag -report: %s: %w", *c.reportPath, err)
	}
	return r, nil
}

func runExplain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := newReportCommand("explain", "explain", "", getenv, stderr)
	fs, db := c.fs, c.db
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *c.reportPath != "" {
		r, err := c.readFile()
		if err != nil {
			return err
		}
		return r.Explain(stdout)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("explain needs one profile name or id")
	}
	s, err := db.Open(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	p, err := lookupProfile(ctx, s, fs.Arg(0))
	if err != nil {
		return err
	}
	return explainProfile(p, stdout)
}

// lookupProfile reads a stored profile by name, else by ID.
func lookupProfile(ctx context.Context, s *store.Store, ref string) (schedloop.Profile, error) {
	p, err := s.GetProfileByName(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		if id, perr := strconv.ParseInt(ref, 10, 64); perr == nil {
			p, err = s.GetProfile(ctx, id)
		}
	}
	return p, err
}

func explainProfile(p schedloop.Profile, w io.Writer) error {
	fmt.Fprintf(w, "status: %s", p.Status)
	if !p.Applied.IsZero() {
		fmt.Fprintf(w, " (applied %s)", p.Applied.Format("2006-01-02 15:04:05Z07:00"))
	}
	if p.Reason != "" {
		fmt.Fprintf(w, ": %s", p.Reason)
	}
	fmt.Fprintln(w)
	if len(p.Evidence) == 0 {
		fmt.Fprintln(w, "no tuning evidence stored with this profile")
		return nil
	}
	r, err := tuner.ReportFromEvidence(p.Evidence)
	if err != nil {
		return err
	}
	if err := r.Explain(w); err != nil {
		return err
	}
	writeStoredPrediction(w, p)
	if len(p.Measured) == 0 {
		fmt.Fprintln(w, "\nmeasured: nothing yet")
		return nil
	}
	fmt.Fprintln(w, "\npredicted (held-out replay) vs measured (cluster):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  metric\tpredicted\tpredicted whole window\tmeasured\tmeasured before")
	for _, k := range metricKeys() {
		fmt.Fprintf(tw, "  %s\t%.4g\t%s\t%.4g\t%.4g\n", k, p.Predicted[k], storedFigure(p.Predicted, tuner.WindowPrefix+k), p.Measured[k], p.Measured["before_"+k])
	}
	fmt.Fprintf(tw, "  regression\t\t\t%+.1f%%\t\n", 100*p.Measured["regression"])
	return tw.Flush()
}

// metricKeys are the metric names in the order explain prints them.
func metricKeys() []string {
	var keys []string
	for _, m := range tuner.Metrics {
		keys = append(keys, string(m))
	}
	sort.Strings(keys)
	return keys
}

// writeStoredPrediction prints the figures stored with the profile as its
// prediction: the held-out replays' and the whole window's (window_*, the
// recorded jobs replayed as recorded with the published predictor table,
// what a replay of the same window is compared with), each beside the
// current profile's. A profile stored before the whole-window figures were
// kept shows "n/a" for them.
func writeStoredPrediction(w io.Writer, p schedloop.Profile) {
	if len(p.Predicted) == 0 {
		return
	}
	fmt.Fprintln(w, "\nstored prediction (current -> proposed):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  metric\theld-out days\twhole window")
	pair := func(prefix, k string) string {
		return storedFigure(p.Predicted, prefix+"baseline_"+k) + " -> " + storedFigure(p.Predicted, prefix+k)
	}
	for _, k := range metricKeys() {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", k, pair("", k), pair(tuner.WindowPrefix, k))
	}
	tw.Flush()
}

// storedFigure prints one stored figure, "n/a" when it is absent.
func storedFigure(m map[string]float64, key string) string {
	v, ok := m[key]
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf("%.4g", v)
}
