package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// benchEnd is where the generated history ends; the API's clock stands there.
var benchEnd = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

const (
	benchDays  = 30
	benchNodes = 125 // x 8 GPUs = 1,000 GPUs
	benchPods  = 60_000
)

// BenchmarkDashboardAPI generates 30 days x 1,000 GPUs of rolled-up history
// with SQL (generate_series: the rollup tables the API reads, 60,000 pods
// and their scheduling attempts), then times requests through the real
// router: the idle-time endpoints (totals and series, groups, heatmap, idle
// holders) and the wait-reason endpoints (cluster-wide reasons, a pod's why).
//
// Headline metrics (scripts/benchreport): api_idle_p95_ms and
// api_wait_p95_ms, with their p50s.
func BenchmarkDashboardAPI(b *testing.B) {
	st := storetest.New(b)
	from := benchEnd.Add(-benchDays * 24 * time.Hour)
	began := time.Now()
	conn, err := st.Pool().Acquire(ctx) // one session: the statements share a temporary table
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release() // before the store closes, even when generation fails
	named := map[string]any{"start": from, "hours": benchDays * 24, "nodes": benchNodes, "pods": benchPods,
		"whypods": whyPods()}
	for _, q := range benchHistorySQL {
		sql, args := positional(q, named)
		t0 := time.Now()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			b.Fatalf("generate history: %v\n%s", err, q)
		}
		b.Logf("%5dms  %.60s", time.Since(t0).Milliseconds(), strings.Join(strings.Fields(q), " "))
	}
	b.Logf("generated 30 days x 1,000 GPUs of history in %s", time.Since(began).Round(time.Millisecond))
	h := api.NewRouter(st, api.Options{Now: func() time.Time { return benchEnd }})

	idle := []string{
		"/api/v1/idle?from=-30d",
		"/api/v1/idle?from=-30d&namespace=ns-3&node_label=pool=a",
		"/api/v1/idle?from=-24h",
		"/api/v1/idle/groups?from=-30d&group_by=node&limit=20",
		"/api/v1/idle/groups?from=-30d&group_by=queue",
		"/api/v1/idle/groups?from=-30d&group_by=namespace",
		"/api/v1/idle/groups?from=-30d&group_by=gpu_model",
		"/api/v1/idle/heatmap?from=-30d&limit=40",
		"/api/v1/idle/holders?from=-30d&limit=15",
		"/api/v1/idle/holders?from=-7d&limit=15&queue=q-1",
	}
	wait := []string{
		"/api/v1/wait/reasons?from=-30d",
		"/api/v1/wait/reasons?from=-7d&queue=q-2",
		"/api/v1/wait/reasons?from=-24h",
	}
	for i := 0; i < whyRequests; i++ {
		wait = append(wait, fmt.Sprintf("/api/v1/why/pods/pod-%d", (i*7919)%benchPods),
			fmt.Sprintf("/api/v1/why?q=ns-%d/pod-%d", ((i*104729)%benchPods)%8, (i*104729)%benchPods))
	}

	const rounds = 20
	var idleMS, waitMS []float64
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		idleMS = append(idleMS, timeRequests(b, h, idle, rounds)...)
		waitMS = append(waitMS, timeRequests(b, h, wait, rounds*len(idle)/len(wait)+1)...)
	}
	b.StopTimer()
	b.ReportMetric(percentile(idleMS, 50), "api_idle_p50_ms@ms")
	b.ReportMetric(percentile(idleMS, 95), "api_idle_p95_ms@ms")
	b.ReportMetric(percentile(waitMS, 50), "api_wait_p50_ms@ms")
	b.ReportMetric(percentile(waitMS, 95), "api_wait_p95_ms@ms")
}

const whyRequests = 30

// whyPods are the pods the why requests ask about: the benchmark gives
// them per-minute GPU rows, so each answer reads their GPU activity.
func whyPods() []string {
	var out []string
	for i := 0; i < whyRequests; i++ {
		out = append(out, fmt.Sprintf("pod-%d", (i*7919)%benchPods), fmt.Sprintf("pod-%d", (i*104729)%benchPods))
	}
	return out
}

// timeRequests GETs each path once untimed (to warm the plan cache), then
// rounds times, returning the latency of each timed request in ms.
func timeRequests(b *testing.B, h http.Handler, paths []string, rounds int) []float64 {
	var out []float64
	per := map[string][]float64{}
	defer func() {
		for _, p := range paths[:min(len(paths), 12)] {
			b.Logf("p50 %6.1fms  p95 %6.1fms  %s", percentile(per[p], 50), percentile(per[p], 95), p)
		}
	}()
	for r := -1; r < rounds; r++ {
		for _, p := range paths {
			rec := httptest.NewRecorder()
			t0 := time.Now()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
			d := time.Since(t0)
			if rec.Code != http.StatusOK {
				b.Fatalf("GET %s = %d %s", p, rec.Code, rec.Body.String())
			}
			if r >= 0 {
				out = append(out, float64(d.Microseconds())/1000)
				per[p] = append(per[p], float64(d.Microseconds())/1000)
			}
		}
	}
	return out
}

// positional turns @name placeholders into $1, $2... in order of first use.
func positional(q string, named map[string]any) (string, []any) {
	var args []any
	index := map[string]int{}
	return nameRE.ReplaceAllStringFunc(q, func(m string) string {
		name := m[1:]
		if _, ok := index[name]; !ok {
			args = append(args, named[name])
			index[name] = len(args)
		}
		return fmt.Sprintf("$%d", index[name])
	}), args
}

var nameRE = regexp.MustCompile(`@[a-z]+`)

func percentile(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

// benchHistorySQL fills the rollup tables and the workload. Parameters:
// @start, @hours, @nodes, @pods. Node n holds a job for four hours
// at a time on (n + hour) % 9 of its 8 GPUs (capped), busy 80-95%.
var benchHistorySQL = []string{
	`INSERT INTO nodes (name, gpu_model, gpu_count, labels, ready)
	 SELECT format('node-%s', lpad(n::text, 4, '0')), CASE WHEN n % 3 = 0 THEN 'H100' ELSE 'A100' END, 8,
	        jsonb_build_object('pool', CASE WHEN n < @nodes / 2 THEN 'a' ELSE 'b' END), true
	 FROM generate_series(0, @nodes::int - 1) n`,
	`CREATE TEMP TABLE bench_node_hours AS
	 SELECT @start::timestamptz + make_interval(hours => h) AS hour, format('node-%s', lpad(n::text, 4, '0')) AS node,
	        CASE WHEN n % 3 = 0 THEN 'H100' ELSE 'A100' END AS model,
	        format('ns-%s', (n + h / 4) % 8) AS ns, format('q-%s', (n + h / 4) % 4) AS queue,
	        format('job-%s-%s', n, h / 4) AS job, least((n + h) % 9, 8) AS held,
	        0.80 + ((n * 31 + h) % 16) / 100.0 AS busy_frac, ((n * 17 + h) % 5) / 10.0 AS waiting_frac
	 FROM generate_series(0, @hours::int - 1) h, generate_series(0, @nodes::int - 1) n`,
	`INSERT INTO gpu_holder_hours (hour, node, gpu_model, pod_namespace, pod_name, job_uid, queue, busy_minutes, idle_minutes)
	 SELECT hour, node, model, ns, job || '-0', job, queue, round(held * 60 * busy_frac), held * 60 - round(held * 60 * busy_frac)
	 FROM bench_node_hours WHERE held > 0`,
	`INSERT INTO gpu_usage_hours (hour, node, gpu_model, pod_namespace, queue, state, gpu_minutes)
	 SELECT hour, node, model, s.ns, s.queue, s.state, s.m
	 FROM bench_node_hours
	 CROSS JOIN LATERAL (VALUES
	     ('busy', ns, queue, round(held * 60 * busy_frac)),
	     ('allocated_idle', ns, queue, held * 60 - round(held * 60 * busy_frac)),
	     ('unallocated_waiting', '', '', round((8 - held) * 60 * waiting_frac)),
	     ('spare', '', '', (8 - held) * 60 - round((8 - held) * 60 * waiting_frac))
	 ) AS s(state, ns, queue, m)
	 WHERE s.m > 0`,
	`INSERT INTO gpu_state_hours (hour, node, gpu_model, pod_namespace, state, gpu_minutes)
	 SELECT hour, node, max(gpu_model), pod_namespace, state, sum(gpu_minutes)
	 FROM gpu_usage_hours GROUP BY hour, node, pod_namespace, state`,
	`INSERT INTO gpu_usage_days (day, node, gpu_model, pod_namespace, queue, state, gpu_minutes)
	 SELECT date_trunc('day', hour, 'UTC'), node, max(gpu_model), pod_namespace, queue, state, sum(gpu_minutes)
	 FROM gpu_usage_hours GROUP BY 1, node, pod_namespace, queue, state`,
	`INSERT INTO pods (uid, namespace, name, queue, gpus, node, created_at, scheduled_at, started_at, finished_at, phase)
	 SELECT format('pod-%s', i), format('ns-%s', i % 8), format('pod-%s', i), format('q-%s', (i % 8) % 4), 1 + i % 8,
	        format('node-%s', lpad((i % @nodes)::text, 4, '0')),
	        c, c + w, c + w, c + w + r, 'Succeeded'
	 FROM generate_series(0, @pods::bigint - 1) i,
	      LATERAL (SELECT @start::timestamptz + make_interval(secs => (i::float8 / @pods) * @hours * 3600) AS c,
	                      make_interval(secs => 60 + (i * 7919) % 5400) AS w,
	                      make_interval(secs => 600 + (i * 104729) % 36000) AS r) t`,
	`INSERT INTO scheduling_attempts (attempt_key, pod_uid, at, result, category, total_nodes, reasons, message)
	 SELECT format('%s/%s', p.uid, k), p.uid, p.created_at + (p.scheduled_at - p.created_at) * (k / 4.0),
	        CASE WHEN k = 4 THEN 'scheduled' ELSE 'unschedulable' END,
	        CASE WHEN k = 4 THEN 'other' ELSE (ARRAY['insufficient_gpu', 'queue_limit', 'gang_incomplete', 'topology', 'taint_affinity'])[1 + abs((hashtext(p.uid) + k) % 5)] END,
	        @nodes::int, jsonb_build_object('Insufficient nvidia.com/gpu', @nodes::int - 3), format('0/%s nodes are available', @nodes::int)
	 FROM pods p, generate_series(1, 4) k`,
	`INSERT INTO wait_reason_hours (hour, category, queue, pod_namespace, pod_seconds, pods)
	 SELECT @start::timestamptz + make_interval(hours => h), c, format('q-%s', ns % 4), format('ns-%s', ns),
	        ((h * 13 + ns * 7 + length(c)) % 50) * 360, 1 + (h + ns) % 30
	 FROM generate_series(0, @hours::int - 1) h, generate_series(0, 7) ns,
	      unnest(ARRAY['not_attempted', 'insufficient_gpu', 'queue_limit', 'gang_incomplete', 'topology', 'taint_affinity', 'preemption', 'other']) c`,
	// The summaries RollupDashboard derives from the tables above, by the
	// same sums.
	`INSERT INTO gpu_node_hours (hour, node, gpu_model, state, gpu_minutes)
	 SELECT hour, node, max(gpu_model), state, sum(gpu_minutes) FROM gpu_usage_hours GROUP BY hour, node, state`,
	`INSERT INTO gpu_tenant_hours (hour, gpu_model, pod_namespace, queue, state, gpu_minutes)
	 SELECT hour, gpu_model, pod_namespace, queue, state, sum(gpu_minutes) FROM gpu_usage_hours
	 GROUP BY hour, gpu_model, pod_namespace, queue, state`,
	`INSERT INTO gpu_node_days (day, node, gpu_model, state, gpu_minutes)
	 SELECT day, node, max(gpu_model), state, sum(gpu_minutes) FROM gpu_usage_days GROUP BY day, node, state`,
	`INSERT INTO gpu_tenant_days (day, gpu_model, pod_namespace, queue, state, gpu_minutes)
	 SELECT day, gpu_model, pod_namespace, queue, state, sum(gpu_minutes) FROM gpu_usage_days
	 GROUP BY day, gpu_model, pod_namespace, queue, state`,
	`INSERT INTO gpu_holder_days (day, node, gpu_model, pod_namespace, pod_name, job_uid, queue, busy_minutes, idle_minutes)
	 SELECT date_trunc('day', hour, 'UTC'), node, max(gpu_model), pod_namespace, pod_name, job_uid, queue,
	        sum(busy_minutes), sum(idle_minutes)
	 FROM gpu_holder_hours GROUP BY 1, node, pod_namespace, pod_name, job_uid, queue`,
	// Per-minute GPU rows of the pods the why requests read, on their
	// node's first GPUs while they ran; a few minutes idle in every ten.
	`INSERT INTO gpu_minutes (minute, gpu_uuid, node, pod_namespace, pod_name, samples, gpu_util_avg, gr_engine_active_avg)
	 SELECT m, format('GPU-%s-%s', p.node, g), p.node, p.namespace, p.name, 4,
	        CASE WHEN extract(minute FROM m)::int % 10 < 3 THEN 1 ELSE 85 END,
	        CASE WHEN extract(minute FROM m)::int % 10 < 3 THEN 0.01 ELSE 0.85 END
	 FROM pods p, generate_series(0, p.gpus - 1) g,
	      generate_series(date_trunc('minute', p.started_at), p.finished_at - interval '1 minute', interval '1 minute') m
	 WHERE p.name = ANY(@whypods::text[])
	 ON CONFLICT DO NOTHING`,
	`ANALYZE`,
}
