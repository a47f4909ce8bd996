package tuner

import (
	"context"
	"slices"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
)

// StartLatency estimates, from stored history, how long the live control
// plane takes to start a job that has room (sim.Config.StartLatency): the
// median stored wait (creation to admission, else start, else first
// binding) of the jobs that found room on arrival, rounded to the
// millisecond. A job found room when the history's own jobs, replayed
// without latency under p (the profile they ran under), start it the moment
// it arrives; its stored wait is then the control plane's alone. Zero when
// no job found room. hist is what w.Jobs were read from (JobsFromHistory),
// matched by namespace/name.
//
// On a cluster whose clock runs at wall speed the latency is a fraction of a
// second and moves nothing; replayed at a compressed clock (the demo's), it
// is multiplied into minutes of trace time, and a replay without it
// predicts every start early.
func StartLatency(ctx context.Context, hist []schedloop.Job, w Workload, base sim.Config, p scoring.Params) (time.Duration, error) {
	found, err := roomWaits(ctx, hist, w, base, p)
	if len(found) == 0 || err != nil {
		return 0, err
	}
	// The lower median: a stored wait, not an average of two.
	return found[(len(found)-1)/2], nil
}

// MaxStartLatencySpread bounds StartLatencies' answer, which a report
// stores.
const MaxStartLatencySpread = 33

// StartLatencies is the spread of the waits StartLatency takes the median
// of (sim.Config.StartLatencySpread): at most MaxStartLatencySpread of
// them, evenly spaced quantiles from the least to the greatest, ascending;
// nil when no job found room.
func StartLatencies(ctx context.Context, hist []schedloop.Job, w Workload, base sim.Config, p scoring.Params) ([]time.Duration, error) {
	found, err := roomWaits(ctx, hist, w, base, p)
	if len(found) <= MaxStartLatencySpread || err != nil {
		return found, err
	}
	out := make([]time.Duration, MaxStartLatencySpread)
	for i := range out {
		out[i] = found[i*(len(found)-1)/(MaxStartLatencySpread-1)]
	}
	return out, nil
}

// roomWaits is the stored waits of the jobs that found room (StartLatency),
// rounded to the millisecond, ascending.
func roomWaits(ctx context.Context, hist []schedloop.Job, w Workload, base sim.Config, p scoring.Params) ([]time.Duration, error) {
	waits := make(map[string]time.Duration, len(hist))
	for _, j := range hist {
		if b := Began(j); !b.IsZero() {
			waits[j.Namespace+"/"+j.Name] = max(b.Sub(j.Created), 0)
		}
	}
	if len(waits) == 0 {
		return nil, nil
	}
	base.StartLatency, base.StartLatencySpread = 0, nil
	res, err := replayWhole(ctx, w, base, FitPredictor(w.Jobs), p)
	if err != nil {
		return nil, err
	}
	var found []time.Duration
	for i, o := range res.Jobs {
		j := w.Jobs[i]
		wait, ok := waits[j.Name]
		if ok && o.State == sim.Done && o.Preemptions == 0 && o.Start == j.Arrival {
			found = append(found, wait.Round(time.Millisecond))
		}
	}
	slices.Sort(found)
	return found, nil
}
