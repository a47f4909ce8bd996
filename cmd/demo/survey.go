package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/schedloop/schedloop/internal/predict"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
	"github.com/schedloop/schedloop/internal/trace"
	"github.com/schedloop/schedloop/internal/tuner"
)

// surveyWindow is one window's replays in the simulator.
type surveyWindow struct {
	skip int
	// stock is the window under the -before-profile; service and exact the
	// same profile ordering by shortest service, predicted from a table
	// fitted on the window and from the exact run times.
	stock, service, exact sim.Metrics
	// tuned is what the tuner, given the window as its history, proposes
	// (as the loop's tuning step does) and the window's replay under it.
	tuned tunedWindow
}

// tunedWindow is the tuner's verdict on one window.
type tunedWindow struct {
	// change is the whole window's mean JCT change under the proposal
	// (Report.Window), published whether the guardrails let it out.
	change    float64
	published bool
}

func (w surveyWindow) queueShare() float64 {
	if w.stock.MeanJCT == 0 {
		return 0
	}
	return w.stock.MeanWait / w.stock.MeanJCT
}

func relChange(before, after float64) float64 {
	if before == 0 {
		return 0
	}
	return after/before - 1
}

// heavyQueueShare splits the survey's windows: those queueing for at least
// this share of JCT under the stock profile are the heavily contended ones,
// where order is expected to matter most.
const heavyQueueShare = 0.6

// survey replays, without a cluster, every window of -jobs jobs that starts
// at every -survey-every'th job of the trace, cut as the loop cuts its
// slice (loadWorkload's rules), and prints how much ordering by shortest
// service changes each window's mean JCT: where in a trace queue order can
// move the loop's headline number at all.
func survey(ctx context.Context, c config, out io.Writer) error {
	all, err := loadTrace(c)
	if err != nil {
		return err
	}
	start, err := beforeProfile(c)
	if err != nil {
		return err
	}
	inv, err := inventory(c)
	if err != nil {
		return err
	}
	cluster := sim.NewCluster(inv)
	stock := tuner.FromDocument(start).Params
	ordered := stock.Clone()
	ordered.Order = scoring.OrderShortestService
	fmt.Fprintf(out, "survey of %s: windows of %d jobs starting every %d jobs, arrivals %gx closer, on %d nodes x %d GPUs, under %s and the same ordered by shortest service\n",
		c.tracePath, c.jobs, c.surveyEvery, c.compress, c.nodes, c.gpus, start.Name)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "skip\tstock mean JCT (s)\tqueueing share\tidle share\tshortest service, predicted: mean JCT\tidle share\texact run times: mean JCT\ttuned: mean JCT\tpublished\t")
	var windows []surveyWindow
	for skip := 0; skip+c.jobs <= len(all); skip += c.surveyEvery {
		jobs, err := windowJobs(all, c, skip)
		if err != nil {
			return err
		}
		table := tuner.FitPredictor(jobs)
		run := func(p scoring.Params, exact bool) (sim.Metrics, error) {
			return replayWindow(cluster, jobs, p, table, exact)
		}
		sw := surveyWindow{skip: skip}
		for _, x := range []struct {
			m     *sim.Metrics
			p     scoring.Params
			exact bool
		}{{&sw.stock, stock, false}, {&sw.service, ordered, false}, {&sw.exact, ordered, true}} {
			if *x.m, err = run(x.p, x.exact); err != nil {
				return fmt.Errorf("window after %d jobs: %w", skip, err)
			}
		}
		if sw.tuned, err = tuneWindow(ctx, c, cluster, jobs, start); err != nil {
			return fmt.Errorf("window after %d jobs: %w", skip, err)
		}
		windows = append(windows, sw)
		fmt.Fprintf(w, "%d\t%.0f\t%.0f%%\t%.1f%%\t%+.1f%%\t%.1f%%\t%+.1f%%\t%+.1f%%\t%s\t\n", skip, sw.stock.MeanJCT, 100*sw.queueShare(), 100*sw.stock.GPUIdleShare,
			100*relChange(sw.stock.MeanJCT, sw.service.MeanJCT), 100*sw.service.GPUIdleShare, 100*relChange(sw.stock.MeanJCT, sw.exact.MeanJCT),
			100*sw.tuned.change, yesNo(sw.tuned.published))
	}
	w.Flush()
	if len(windows) == 0 {
		return fmt.Errorf("flags -jobs/-survey-every: the trace's %d jobs hold no window of %d", len(all), c.jobs)
	}
	writeSurveySummary(out, windows)
	writeTunedSummary(out, windows)
	return nil
}

// tuneWindow runs the tuner on one window as the loop's tuning step runs it
// on the first replay's stored jobs (loopTuneInput), in trace time, and
// replays the whole window under its proposal.
func tuneWindow(ctx context.Context, c config, cluster *sim.Cluster, jobs []sim.Job, start profile.Document) (tunedWindow, error) {
	rep, err := tuner.Tune(ctx, loopTuneInput(c, tuner.Workload{Cluster: cluster, Jobs: jobs}, start, "survey", 10*time.Minute,
		sim.Config{Preemption: true, HighPriority: HighPriority}))
	if err != nil {
		return tunedWindow{}, fmt.Errorf("tune: %w", err)
	}
	return tunedWindow{change: relChange(rep.Window.Before[tuner.MetricMeanJCT], rep.Window.After[tuner.MetricMeanJCT]),
		published: rep.Decision.Publish}, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// windowJobs cuts the window of -jobs jobs after skip as the loop cuts its
// slice, named as stored history names them.
func windowJobs(all []trace.Job, c config, skip int) ([]sim.Job, error) {
	wc := c
	wc.skip = skip
	tj, err := sliceJobs(all, wc)
	if err != nil {
		return nil, err
	}
	jobs := sim.JobsFromTrace(tj)
	for i := range jobs {
		// Stored history names jobs namespace/name; one namespace.
		jobs[i].Name = "survey/" + jobs[i].Name
	}
	return jobs, nil
}

// replayWindow replays jobs under p in the simulator, run times predicted
// from table or, when exact, known.
func replayWindow(cluster *sim.Cluster, jobs []sim.Job, p scoring.Params, table predict.Table, exact bool) (sim.Metrics, error) {
	cfg := sim.Config{Params: p, Preemption: true, HighPriority: HighPriority,
		Workload: scoring.TypicalWorkload(sim.Requests(jobs), 0.95)}
	js := slices.Clone(jobs)
	if exact {
		for i := range js {
			js[i].Predicted = js[i].Duration
		}
	} else {
		pr, err := predict.FromTable(table)
		if err != nil {
			return sim.Metrics{}, err
		}
		cfg.Predictor = tuner.TablePredictor{P: pr}
	}
	r, err := sim.Run(cluster, js, cfg)
	return r.Metrics, err
}

// pickWindow chooses -skip for -pick-every: of the windows of -jobs jobs
// starting every -pick-every jobs of the trace, the one whose jobs queue
// for the largest share of their JCT when replayed in the simulator under
// -before-profile (the earliest on a tie). It looks only at the stock
// profile's replay, never at what tuning would gain, so the window is the
// trace's most contended one by a rule that does not know the answer.
func pickWindow(c config, out io.Writer) (int, error) {
	all, err := loadTrace(c)
	if err != nil {
		return 0, err
	}
	start, err := beforeProfile(c)
	if err != nil {
		return 0, err
	}
	inv, err := inventory(c)
	if err != nil {
		return 0, err
	}
	cluster := sim.NewCluster(inv)
	stock := tuner.FromDocument(start).Params
	best, bestShare, n := -1, -1.0, 0
	for skip := 0; skip+c.jobs <= len(all); skip += c.pickEvery {
		jobs, err := windowJobs(all, c, skip)
		if err != nil {
			return 0, err
		}
		m, err := replayWindow(cluster, jobs, stock, tuner.FitPredictor(jobs), false)
		if err != nil {
			return 0, fmt.Errorf("window after %d jobs: %w", skip, err)
		}
		n++
		if sh := (surveyWindow{stock: m}).queueShare(); sh > bestShare {
			best, bestShare = skip, sh
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("flags -jobs/-pick-every: the trace's %d jobs hold no window of %d", len(all), c.jobs)
	}
	fmt.Fprintf(out, "window: the %d jobs after %d, of %d windows starting every %d jobs the one queueing most under %s in the simulator (%.0f%% of mean JCT)\n",
		c.jobs, best, n, c.pickEvery, start.Name, 100*bestShare)
	return best, nil
}

// writeSurveySummary prints the quantiles of the mean JCT changes and their
// means over the heavily contended windows and the rest.
func writeSurveySummary(w io.Writer, windows []surveyWindow) {
	for _, k := range []struct {
		name string
		of   func(surveyWindow) sim.Metrics
	}{{"predicted", func(s surveyWindow) sim.Metrics { return s.service }}, {"exact run times", func(s surveyWindow) sim.Metrics { return s.exact }}} {
		var all, heavy, rest []float64
		quarter := 0
		for _, s := range windows {
			ch := relChange(s.stock.MeanJCT, k.of(s).MeanJCT)
			all = append(all, ch)
			if ch <= -0.25 {
				quarter++
			}
			if s.queueShare() >= heavyQueueShare {
				heavy = append(heavy, ch)
			} else {
				rest = append(rest, ch)
			}
		}
		slices.Sort(all)
		at := func(q float64) float64 { return all[int(q*float64(len(all)-1))] }
		fmt.Fprintf(w, "shortest service, %s: mean JCT change over %d windows: median %+.1f%%, first quartile %+.1f%%, first decile %+.1f%%, best %+.1f%%; 25%% or more lower in %d\n",
			k.name, len(all), 100*at(0.5), 100*at(0.25), 100*at(0.1), 100*all[0], quarter)
		fmt.Fprintf(w, "  windows queueing for %.0f%% of JCT or more under the stock profile: %d, mean change %s; the others: %d, mean change %s\n",
			100*heavyQueueShare, len(heavy), meanChange(heavy), len(rest), meanChange(rest))
	}
}

// writeTunedSummary prints how often the tuner published and what its
// proposals did to the windows' mean JCT.
func writeTunedSummary(w io.Writer, windows []surveyWindow) {
	var published, refused []float64
	quarter := 0
	for _, s := range windows {
		if s.tuned.published {
			published = append(published, s.tuned.change)
			if s.tuned.change <= -0.25 {
				quarter++
			}
		} else {
			refused = append(refused, s.tuned.change)
		}
	}
	fmt.Fprintf(w, "tuner (-knobs, guardrails as the loop applies them): published in %d of %d windows, mean JCT change there %s (25%% or more lower in %d); the refused proposals' mean change %s\n",
		len(published), len(windows), meanChange(published), quarter, meanChange(refused))
}

func meanChange(v []float64) string {
	if len(v) == 0 {
		return "n/a"
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return fmt.Sprintf("%+.1f%%", 100*s/float64(len(v)))
}
