package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ETAEstimate is one pending job's expected start as estimated at MadeAt;
// P10/P50/P90 are zero when the job was not expected to start.
type ETAEstimate struct {
	JobUID              string
	MadeAt              time.Time
	State               string
	P10, P50, P90       time.Time
	PredictedRunSeconds float64
	Nodes               []string
}

// InsertETAEstimates stores estimates made at one instant and deletes those
// made before keepSince, in one transaction.
func (s *Store) InsertETAEstimates(ctx context.Context, est []ETAEstimate, keepSince time.Time) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM eta_estimates WHERE made_at < $1`, keepSince); err != nil {
			return err
		}
		rows := make([][]any, len(est))
		for i, e := range est {
			nodes := e.Nodes
			if nodes == nil {
				nodes = []string{}
			}
			rows[i] = []any{e.JobUID, e.MadeAt, e.State, nullTime(e.P10), nullTime(e.P50), nullTime(e.P90), e.PredictedRunSeconds, nodes}
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"eta_estimates"},
			[]string{"job_uid", "made_at", "state", "p10", "p50", "p90", "predicted_run_seconds", "nodes"}, pgx.CopyFromRows(rows))
		return err
	})
}

// ETAScore measures the estimates made in [from, to) of jobs that have
// since started, at least minWait after the estimate (a start that came
// at once flatters any estimate): the median absolute error of the p50
// estimate in percent of the actual wait, and the share of actual starts
// inside p10..p90. A job's start is its admission (a gang's last member
// bound), else its first binding.
type ETAScore struct {
	Estimates         int     `json:"estimates"`
	MedianAbsErrorPct float64 `json:"median_abs_error_pct"`
	IntervalCoverage  float64 `json:"interval_coverage"`
}

// ETAAccuracy scores the estimates made in [from, to) (ETAScore).
func (s *Store) ETAAccuracy(ctx context.Context, from, to time.Time, minWait time.Duration) (ETAScore, error) {
	var a ETAScore
	err := s.pool.QueryRow(ctx, `
		WITH m AS (
			SELECT extract(epoch FROM coalesce(j.admitted_at, j.first_scheduled_at) - e.made_at) AS actual,
			       extract(epoch FROM e.p50 - e.made_at) AS p50,
			       coalesce(j.admitted_at, j.first_scheduled_at) BETWEEN e.p10 AND coalesce(e.p90, 'infinity') AS covered
			FROM eta_estimates e JOIN jobs j ON j.uid = e.job_uid
			WHERE e.made_at >= $1 AND e.made_at < $2 AND e.state = 'starts'
			  AND coalesce(j.admitted_at, j.first_scheduled_at) - e.made_at > make_interval(secs => $3))
		SELECT count(*), coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY 100 * abs(p50 - actual) / actual), 0),
		       coalesce(avg(covered::int), 0)
		FROM m`, from, to, minWait.Seconds()).Scan(&a.Estimates, &a.MedianAbsErrorPct, &a.IntervalCoverage)
	if err != nil {
		return a, fmt.Errorf("eta accuracy: %w", err)
	}
	return a, nil
}
