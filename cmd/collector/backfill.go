package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/dbflags"
	"github.com/schedloop/schedloop/internal/dcgm"
	"github.com/schedloop/schedloop/internal/store"
)

func runBackfill(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("collector backfill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := dbflags.Register(fs, getenv)
	db.RegisterAutoMigrate(fs)
	promURL := fs.String("prometheus-url", "", "Prometheus server that scraped dcgm-exporter (e.g. http://prometheus.monitoring:9090); required")
	fromFlag := fs.String("from", "", "start of the history to load, RFC 3339 or a relative time such as -7d or -12h; required")
	toFlag := fs.String("to", "now", "end of the history to load (exclusive), RFC 3339, relative or now")
	step := fs.Duration("step", dcgm.DefaultBackfillStep, "resolution of the loaded samples (one per GPU per step)")
	matchers := fs.String("matchers", "", "extra PromQL label matchers for the dcgm-exporter series, e.g. 'cluster=\"gpu-a\"'")
	window := fs.Duration("window", time.Hour, "history read and stored per query, which bounds memory (1,000 GPUs at 30 s: 120,000 samples an hour)")
	threshold := fs.Float64("idle-threshold", store.DefaultIdleThreshold, "engine activity (0..1) below which a held GPU counts as idle, for the rollups")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: collector backfill [flags] -prometheus-url URL -from TIME

Loads GPU telemetry that a Prometheus server already scraped from
dcgm-exporter into Postgres, then rolls the range up, so the dashboard and
the tuner see history from before the collector ran. Each window is stored
at most once: running it again over the same range adds nothing.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("backfill: unexpected argument %q", fs.Arg(0))
	}
	now := time.Now().UTC()
	switch {
	case *promURL == "":
		return fmt.Errorf("flag -prometheus-url: give the Prometheus server to read from")
	case *fromFlag == "":
		return fmt.Errorf("flag -from: give the start of the history to load")
	case *step <= 0:
		return fmt.Errorf("flag -step %v: want a positive duration", *step)
	case *window < *step:
		return fmt.Errorf("flag -window %v: want at least one -step (%v)", *window, *step)
	case !(*threshold > 0 && *threshold <= 1):
		return fmt.Errorf("flag -idle-threshold %v: want a number in (0, 1]", *threshold)
	}
	from, err := parseWhen("from", *fromFlag, now)
	if err != nil {
		return err
	}
	to, err := parseWhen("to", *toFlag, now)
	if err != nil {
		return err
	}
	if !from.Before(to) {
		return fmt.Errorf("flag -from %s: not before -to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	bf, err := dcgm.NewBackfill(*promURL, *step)
	if err != nil {
		return fmt.Errorf("flag -prometheus-url %q: %w", *promURL, err)
	}
	bf.Matchers = *matchers
	s, err := db.Open(ctx, stderr)
	if err != nil {
		return err
	}
	defer s.Close()

	var read, stored, windows, skipped int
	for w := from; w.Before(to); w = w.Add(*window) {
		end := w.Add(*window)
		if end.After(to) {
			end = to
		}
		// Range includes its end; the next window starts there.
		samples, err := bf.Range(ctx, w, end.Add(-time.Nanosecond))
		if err != nil {
			return err
		}
		windows++
		read += len(samples)
		if len(samples) == 0 {
			continue
		}
		ok, err := s.CopyGPUSamplesOnce(ctx, backfillBatchID(*promURL, *matchers, *step, w, end), samples)
		if err != nil {
			return fmt.Errorf("store the samples of %s..%s: %w", w.Format(time.RFC3339), end.Format(time.RFC3339), err)
		}
		if ok {
			stored += len(samples)
		} else {
			skipped++
		}
	}
	// Every closed minute of the range, as the running collector's roller
	// would roll it up.
	r := &collector.Roller{Store: s, Threshold: *threshold, Lookback: to.Sub(from.Truncate(time.Minute)),
		Now: func() time.Time { return to.Add(collector.DefaultRollupLateness) }}
	if err := r.Once(ctx); err != nil {
		return fmt.Errorf("roll up %s..%s: %w", from.Format(time.RFC3339), to.Format(time.RFC3339), err)
	}
	fmt.Fprintf(stdout, "backfilled %s..%s from %s: %d samples read in %d windows, %d stored, %d windows already stored before\n",
		from.Format(time.RFC3339), to.Format(time.RFC3339), *promURL, read, windows, stored, skipped)
	return nil
}

// backfillBatchID names one window of one backfill, so that running the same
// backfill again stores nothing twice.
func backfillBatchID(url, matchers string, step time.Duration, from, to time.Time) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%s\x00%d\x00%d", url, matchers, step, from.UnixNano(), to.UnixNano())))
	return "backfill/" + hex.EncodeToString(h[:16])
}

// parseWhen reads RFC 3339, now, or a relative time before now (-7d, -12h, -30m).
func parseWhen(flagName, s string, now time.Time) (time.Time, error) {
	if s == "now" {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if len(s) > 2 && s[0] == '-' {
		unit := map[byte]time.Duration{'m': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour}[s[len(s)-1]]
		var n int
		if _, err := fmt.Sscanf(s[1:len(s)-1], "%d", &n); err == nil && unit > 0 && n > 0 && n <= 36500*int(24*time.Hour/unit) {
			return now.Add(-time.Duration(n) * unit), nil
		}
	}
	return time.Time{}, fmt.Errorf("flag -%s %q: not RFC 3339 (2026-11-30T10:00:00Z), now, or a relative time such as -7d, -12h, -30m", flagName, s)
}
