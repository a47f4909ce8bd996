package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/schedloop/schedloop/internal/dbflags"
	"github.com/schedloop/schedloop/internal/eta"
	"github.com/schedloop/schedloop/internal/etaserve"
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
	withETA := fs.Bool("eta", false, "for a job still waiting, also estimate when it starts (p10/p50/p90, the nodes it would take, what it waits for), replaying the stored cluster forward under the applied profile")
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
	var estimate *etaserve.JobETA
	if *withETA {
		jobUID := st.UID
		if st.Kind == "pod" {
			jobUID = st.Job
		}
		a, err := (&etaserve.Service{Store: s}).Pending(ctx)
		if err != nil {
			return fmt.Errorf("why %s: estimate: %w", fs.Arg(0), err)
		}
		for i := range a.Jobs {
			if a.Jobs[i].UID == jobUID {
				estimate = &a.Jobs[i]
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if *withETA {
			return enc.Encode(struct {
				why.Story
				ETA *etaserve.JobETA `json:"eta"`
			}{st, estimate})
		}
		return enc.Encode(st)
	}
	if err := st.WriteText(stdout, *attempts); err != nil || !*withETA {
		return err
	}
	return writeETA(stdout, estimate)
}

// writeETA prints a waiting job's estimate, or says there is none.
func writeETA(w io.Writer, e *etaserve.JobETA) error {
	if e == nil {
		_, err := fmt.Fprintln(w, "\nExpected start: none; the job is not waiting")
		return err
	}
	var err error
	switch e.State {
	case eta.Starts:
		p90 := "not within the replay"
		if e.WaitP90Secs != nil {
			p90 = fmtWait(*e.WaitP90Secs)
		}
		_, err = fmt.Fprintf(w, "\nExpected start: in %s (p50, %s), between %s and %s (p10..p90); on %s; waits for %s; predicted run %s\n",
			fmtWait(*e.WaitP50Secs), e.P50.Local().Format(time.DateTime), fmtWait(*e.WaitP10Secs), p90,
			orNone(e.Nodes), orNone(e.WaitsFor), fmtWait(e.PredictedRunSecs))
	default:
		_, err = fmt.Fprintf(w, "\nExpected start: %s: %s\n", e.State, e.Reason)
	}
	return err
}

func fmtWait(s float64) string { return (time.Duration(s) * time.Second).Round(time.Second).String() }

func orNone(v []string) string {
	if len(v) == 0 {
		return "none"
	}
	return strings.Join(v, ", ")
}
