package tuner

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/schedloop/schedloop/internal/eta"
)

// HeliosETA backtests the wait estimates (internal/eta) on the Helios
// workload under policy p: each VC is replayed under p, and at a seeded
// sample of the submissions of jobs that waited longer than opt.MinWait
// the estimate is asked for the new job's start knowing only what was known
// then. opt.Samples is shared among the VCs by their jobs; points come
// back VC by VC in the workload's order.
func HeliosETA(ctx context.Context, w HeliosWorkload, p HeliosPolicy, opt eta.BacktestOptions, workers int) ([]eta.Point, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	total := 0
	for _, vc := range w.VCs {
		total += len(w.Jobs[vc.Name])
	}
	if total == 0 {
		return nil, fmt.Errorf("helios eta: the workload has no jobs")
	}
	points := make([][]eta.Point, len(w.VCs))
	errs := make([]error, len(w.VCs))
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i, vc := range w.VCs {
		jobs := w.Jobs[vc.Name]
		if len(jobs) == 0 {
			continue
		}
		if p.Jobs != nil {
			jobs = p.Jobs(jobs)
		}
		vo := opt
		if opt.Samples > 0 {
			// At least one per VC, so a small VC is not left out.
			vo.Samples = max(1, (opt.Samples*len(jobs)+total-1)/total)
		}
		vo.Seed = opt.Seed ^ uint64(i+1)
		// The replays of one VC's backtest run one at a time: the VCs
		// already fill the workers.
		vo.Forecast.Workers = 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cfg, err := p.Config()
			if err != nil {
				errs[i] = err
				return
			}
			cfg.Preemption = p.Preemption
			points[i], errs[i] = eta.Backtest(ctx, vc.cluster(), jobs, cfg, vo)
		}()
	}
	wg.Wait()
	var out []eta.Point
	for i := range w.VCs {
		if errs[i] != nil {
			return nil, fmt.Errorf("helios eta, VC %s: %w", w.VCs[i].Name, errs[i])
		}
		out = append(out, points[i]...)
	}
	return out, nil
}
