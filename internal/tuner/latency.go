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
	waits := make(map[string]time.Duration, len(hist))
	for _, j := range hist {
		if b := Began(j); !b.IsZero() {
			waits[j.Namespace+"/"+j.Name] = max(b.Sub(j.Created), 0)
		}
	}
	if len(waits) == 0 {
		return 0, nil
	}
	base.StartLatency = 0
	res, err := replayWhole(ctx, w, base, FitPredictor(w.Jobs), p)
	if err != nil {
		return 0, err
	}
	var found []time.Duration
	for i, o := range res.Jobs {
		j := w.Jobs[i]
		wait, ok := waits[j.Name]
		if ok && o.State == sim.Done && o.Preemptions == 0 && o.Start == j.Arrival {
			found = append(found, wait)
		}
	}
	if len(found) == 0 {
		return 0, nil
	}
	slices.Sort(found)
	// The lower median: a stored wait, not an average of two.
	return found[(len(found)-1)/2].Round(time.Millisecond), nil
}
