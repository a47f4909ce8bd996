package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The dashboard's rollups (migration 00003) and the read queries the JSON
// API serves from them. Every query here reads per-hour or per-day tables,
// never gpu_samples; the per-pod views are read for one pod at a time.

// RollupDashboard recomputes the hourly dashboard tables (gpu_holder_hours,
// gpu_usage_hours, gpu_node_hours, gpu_tenant_hours, wait_reason_hours) for
// the whole hours touching [from, to), and the daily ones (gpu_usage_days,
// gpu_node_days, gpu_tenant_days, gpu_holder_days) for the whole days
// touching it, in one transaction. Call it after RollupStates for the same
// range, with the same threshold, so the two agree.
func (s *Store) RollupDashboard(ctx context.Context, from, to time.Time, threshold float64) error {
	hourFrom := from.UTC().Truncate(time.Hour)
	hourTo := to.UTC().Add(time.Hour - time.Nanosecond).Truncate(time.Hour)
	dayFrom := truncDay(hourFrom)
	dayTo := truncDay(hourTo.Add(24*time.Hour - time.Nanosecond))
	steps := []struct {
		what string
		sql  string
		args []any
	}{
		{"clear holder hours", `DELETE FROM gpu_holder_hours WHERE hour >= $1 AND hour < $2`, []any{hourFrom, hourTo}},
		{"holder hours", rollupHolderHoursSQL, []any{hourFrom, hourTo, threshold}},
		{"clear usage hours", `DELETE FROM gpu_usage_hours WHERE hour >= $1 AND hour < $2`, []any{hourFrom, hourTo}},
		{"usage hours", rollupUsageHoursSQL, []any{hourFrom, hourTo}},
		{"clear usage days", `DELETE FROM gpu_usage_days WHERE day >= $1 AND day < $2`, []any{dayFrom, dayTo}},
		{"usage days", rollupUsageDaysSQL, []any{dayFrom, dayTo}},
		{"clear node hours", `DELETE FROM gpu_node_hours WHERE hour >= $1 AND hour < $2`, []any{hourFrom, hourTo}},
		{"node hours", rollupNodeHoursSQL, []any{hourFrom, hourTo}},
		{"clear tenant hours", `DELETE FROM gpu_tenant_hours WHERE hour >= $1 AND hour < $2`, []any{hourFrom, hourTo}},
		{"tenant hours", rollupTenantHoursSQL, []any{hourFrom, hourTo}},
		{"clear node days", `DELETE FROM gpu_node_days WHERE day >= $1 AND day < $2`, []any{dayFrom, dayTo}},
		{"node days", rollupNodeDaysSQL, []any{dayFrom, dayTo}},
		{"clear tenant days", `DELETE FROM gpu_tenant_days WHERE day >= $1 AND day < $2`, []any{dayFrom, dayTo}},
		{"tenant days", rollupTenantDaysSQL, []any{dayFrom, dayTo}},
		{"clear holder days", `DELETE FROM gpu_holder_days WHERE day >= $1 AND day < $2`, []any{dayFrom, dayTo}},
		{"holder days", rollupHolderDaysSQL, []any{dayFrom, dayTo}},
		{"clear wait reason hours", `DELETE FROM wait_reason_hours WHERE hour >= $1 AND hour < $2`, []any{hourFrom, hourTo}},
		{"wait reason hours", rollupWaitReasonHoursSQL, []any{hourFrom, hourTo}},
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, st := range steps {
			if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
				return fmt.Errorf("%s: %w", st.what, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("roll up dashboard tables %s..%s: %w", hourFrom.Format(time.RFC3339), hourTo.Format(time.RFC3339), err)
	}
	return nil
}

func truncDay(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// A held device-minute is busy or idle by the same rule as RollupStates, and
// counts by its compute share as there. The holder's job and queue come from
// the newest pod of that name created before the hour ended (names are
// reused, UIDs are not in telemetry).
const rollupHolderHoursSQL = `
INSERT INTO gpu_holder_hours (hour, node, gpu_model, pod_namespace, pod_name, job_uid, queue, busy_minutes, idle_minutes)
SELECT h.hour, h.node, coalesce(n.gpu_model, g.model, ''), h.pod_namespace, h.pod_name,
       coalesce(p.job_uid, ''), coalesce(p.queue, ''), h.busy, h.idle
FROM (
    SELECT date_trunc('hour', minute) AS hour, node, pod_namespace, pod_name,
           coalesce(sum(compute_share::double precision) FILTER (WHERE greatest(gr_engine_active_avg, gpu_util_avg / 100) >= $3), 0) AS busy,
           coalesce(sum(compute_share::double precision) FILTER (WHERE greatest(gr_engine_active_avg, gpu_util_avg / 100) < $3), 0) AS idle
    FROM gpu_device_minutes
    WHERE minute >= $1 AND minute < $2 AND pod_name <> ''
    GROUP BY 1, 2, 3, 4
) h
LEFT JOIN nodes n ON n.name = h.node
LEFT JOIN LATERAL (SELECT model FROM gpus WHERE gpus.node = h.node ORDER BY uuid LIMIT 1) g ON true
LEFT JOIN LATERAL (
    SELECT job_uid, queue FROM pods
    WHERE namespace = h.pod_namespace AND name = h.pod_name AND created_at < h.hour + interval '1 hour'
    ORDER BY created_at DESC LIMIT 1
) p ON true`

// Free GPU time comes from gpu_state_hours (it has no holder, so no queue);
// held GPU time from gpu_holder_hours, which knows the holder's queue.
const rollupUsageHoursSQL = `
INSERT INTO gpu_usage_hours (hour, node, gpu_model, pod_namespace, queue, state, gpu_minutes)
SELECT hour, node, gpu_model, pod_namespace, '', state, gpu_minutes
FROM gpu_state_hours
WHERE hour >= $1 AND hour < $2 AND state IN ('unallocated_waiting', 'spare')
UNION ALL
SELECT h.hour, h.node, max(h.gpu_model), h.pod_namespace, h.queue, s.state, sum(s.minutes)
FROM gpu_holder_hours h
CROSS JOIN LATERAL (VALUES ('busy', h.busy_minutes), ('allocated_idle', h.idle_minutes)) AS s(state, minutes)
WHERE h.hour >= $1 AND h.hour < $2 AND s.minutes > 0
GROUP BY h.hour, h.node, h.pod_namespace, h.queue, s.state`

const rollupUsageDaysSQL = `
INSERT INTO gpu_usage_days (day, node, gpu_model, pod_namespace, queue, state, gpu_minutes)
SELECT date_trunc('day', hour, 'UTC'), node, max(gpu_model), pod_namespace, queue, state, sum(gpu_minutes)
FROM gpu_usage_hours
WHERE hour >= $1 AND hour < $2
GROUP BY 1, node, pod_namespace, queue, state`

// The summaries of migration 00006 drop a dimension of their source; a
// day's rows are summed from that day's hours, so both agree exactly.
const (
	rollupNodeHoursSQL = `
INSERT INTO gpu_node_hours (hour, node, gpu_model, state, gpu_minutes)
SELECT hour, node, max(gpu_model), state, sum(gpu_minutes)
FROM gpu_usage_hours WHERE hour >= $1 AND hour < $2
GROUP BY hour, node, state`
	rollupTenantHoursSQL = `
INSERT INTO gpu_tenant_hours (hour, gpu_model, pod_namespace, queue, state, gpu_minutes)
SELECT hour, gpu_model, pod_namespace, queue, state, sum(gpu_minutes)
FROM gpu_usage_hours WHERE hour >= $1 AND hour < $2
GROUP BY hour, gpu_model, pod_namespace, queue, state`
	rollupNodeDaysSQL = `
INSERT INTO gpu_node_days (day, node, gpu_model, state, gpu_minutes)
SELECT day, node, max(gpu_model), state, sum(gpu_minutes)
FROM gpu_usage_days WHERE day >= $1 AND day < $2
GROUP BY day, node, state`
	rollupTenantDaysSQL = `
INSERT INTO gpu_tenant_days (day, gpu_model, pod_namespace, queue, state, gpu_minutes)
SELECT day, gpu_model, pod_namespace, queue, state, sum(gpu_minutes)
FROM gpu_usage_days WHERE day >= $1 AND day < $2
GROUP BY day, gpu_model, pod_namespace, queue, state`
	rollupHolderDaysSQL = `
INSERT INTO gpu_holder_days (day, node, gpu_model, pod_namespace, pod_name, job_uid, queue, busy_minutes, idle_minutes)
SELECT date_trunc('day', hour, 'UTC'), node, max(gpu_model), pod_namespace, pod_name, job_uid, queue,
       sum(busy_minutes), sum(idle_minutes)
FROM gpu_holder_hours WHERE hour >= $1 AND hour < $2
GROUP BY 1, node, pod_namespace, pod_name, job_uid, queue`
)

// Each waiting interval of a pod is cut at hour boundaries; pods are the
// distinct pods that waited for that reason within the hour.
const rollupWaitReasonHoursSQL = `
INSERT INTO wait_reason_hours (hour, category, queue, pod_namespace, pod_seconds, pods)
SELECT h.hour, iv.category, iv.queue, iv.namespace,
       sum(extract(epoch FROM least(iv.e, h.hour + interval '1 hour') - greatest(iv.s, h.hour))),
       count(DISTINCT iv.pod_uid)
FROM (
    SELECT w.pod_uid, w.category, p.queue, p.namespace,
           greatest(w.started_at, $1) AS s, least(w.ended_at, $2) AS e
    FROM pods p
    JOIN LATERAL (SELECT * FROM pod_wait_intervals wi WHERE wi.pod_uid = p.uid) w ON true
    WHERE p.created_at < $2 AND coalesce(p.scheduled_at, p.finished_at, 'infinity') > $1
      AND w.ended_at > $1 AND w.started_at < $2 AND w.ended_at > w.started_at
) iv
CROSS JOIN LATERAL generate_series(date_trunc('hour', iv.s), iv.e - interval '1 microsecond', interval '1 hour') AS h(hour)
GROUP BY 1, 2, 3, 4`

// Resolution is the bucket width of a dashboard query: it picks the table.
type Resolution int

const (
	Hourly Resolution = iota
	Daily
)

// Duration is the width of one bucket.
func (r Resolution) Duration() time.Duration {
	if r == Daily {
		return 24 * time.Hour
	}
	return time.Hour
}

// Align widens [from, to) to whole buckets of r, in UTC.
func (r Resolution) Align(from, to time.Time) (time.Time, time.Time) {
	d := r.Duration()
	from, to = from.UTC(), to.UTC()
	f := from.Truncate(d)
	t := to.Truncate(d)
	if t.Before(to) {
		t = t.Add(d)
	}
	return f, t
}

// UsageFilter narrows the GPU usage queries. Empty lists match everything;
// NodeLabels keeps nodes carrying every one of those labels.
type UsageFilter struct {
	From, To   time.Time
	Nodes      []string
	Namespaces []string
	Queues     []string
	GPUModels  []string
	NodeLabels map[string]string
}

func (f UsageFilter) args() []any {
	var labels any // NULL when no label filter
	if len(f.NodeLabels) > 0 {
		labels = f.NodeLabels
	}
	return []any{f.From, f.To, orNone(f.Nodes), orNone(f.Namespaces), orNone(f.Queues), orNone(f.GPUModels), labels}
}

func orNone(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Every usage query filters with the same parameters, $1..$7 of
// UsageFilter.args. A table without a column gets the condition that its
// filter is empty instead, so the parameters keep their types and a table
// is only ever read for a filter it can answer.
func usageWhere(src usageSource) string {
	w := ""
	if src.node {
		w += `
    AND (cardinality($3::text[]) = 0 OR node = ANY($3::text[]))
    AND ($7::jsonb IS NULL OR node IN (SELECT name FROM nodes WHERE labels @> $7::jsonb))`
	} else {
		w += `
    AND cardinality($3::text[]) = 0 AND $7::jsonb IS NULL`
	}
	if src.tenant {
		w += `
    AND (cardinality($4::text[]) = 0 OR pod_namespace = ANY($4::text[]))
    AND (cardinality($5::text[]) = 0 OR queue = ANY($5::text[]))`
	} else {
		w += `
    AND cardinality($4::text[]) = 0 AND cardinality($5::text[]) = 0`
	}
	return w + `
    AND (cardinality($6::text[]) = 0 OR gpu_model = ANY($6::text[]))`
}

// Dimension is what GPU time is grouped by.
type Dimension string

const (
	ByCluster   Dimension = "cluster"
	ByNode      Dimension = "node"
	ByNamespace Dimension = "namespace"
	ByQueue     Dimension = "queue"
	ByGPUModel  Dimension = "gpu_model"
)

// Dimensions lists every grouping the API accepts.
var Dimensions = []Dimension{ByCluster, ByNode, ByNamespace, ByQueue, ByGPUModel}

// usageSource is one table of GPU-minutes: its time column and whether it
// keeps nodes and tenants (namespace and queue). Every table has the GPU
// model and the state.
type usageSource struct {
	table, col   string
	node, tenant bool
}

// sourceKind names the three tables of a resolution, from the smallest.
type sourceKind int

const (
	tenantSource sourceKind = iota // gpu_tenant_*: no node
	nodeSource                     // gpu_node_*: no namespace or queue
	fullSource                     // gpu_usage_*: both
)

var usageSources = map[Resolution]map[sourceKind]usageSource{
	Hourly: {
		tenantSource: {"gpu_tenant_hours", "hour", false, true},
		nodeSource:   {"gpu_node_hours", "hour", true, false},
		fullSource:   {"gpu_usage_hours", "hour", true, true},
	},
	Daily: {
		tenantSource: {"gpu_tenant_days", "day", false, true},
		nodeSource:   {"gpu_node_days", "day", true, false},
		fullSource:   {"gpu_usage_days", "day", true, true},
	},
}

// pick chooses the smallest table with every column the request filters
// or groups by; all of them hold the same GPU-minutes.
func (f UsageFilter) pick(byNode, byTenant bool) sourceKind {
	node := byNode || len(f.Nodes) > 0 || len(f.NodeLabels) > 0
	tenant := byTenant || len(f.Namespaces) > 0 || len(f.Queues) > 0
	switch {
	case !node:
		return tenantSource
	case !tenant:
		return nodeSource
	default:
		return fullSource
	}
}

// The only SQL text chosen at run time is picked from these constant tables
// by typed keys; request strings only ever travel as parameters.
type usageKey struct {
	res Resolution
	src sourceKind
}

var (
	dimColumns = map[Dimension]string{ByCluster: "''", ByNode: "node", ByNamespace: "pod_namespace",
		ByQueue: "queue", ByGPUModel: "gpu_model"}
	usageSeriesSQL  = map[usageKey]string{}
	usageGroupsSQL  = map[usageKey]map[Dimension]string{}
	usageHeatmapSQL = map[usageKey]string{}
)

func init() {
	for res, srcs := range usageSources {
		for kind, src := range srcs {
			key := usageKey{res, kind}
			where := usageWhere(src)
			usageSeriesSQL[key] = fmt.Sprintf(`
SELECT %[2]s, state, sum(gpu_minutes)::bigint FROM %[1]s
WHERE %[2]s >= $1 AND %[2]s < $2`+where+`
GROUP BY 1, 2 ORDER BY 1, 2`, src.table, src.col)
			usageGroupsSQL[key] = map[Dimension]string{}
			for dim, expr := range dimColumns {
				if (dim == ByNode && !src.node) || ((dim == ByNamespace || dim == ByQueue) && !src.tenant) {
					continue
				}
				usageGroupsSQL[key][dim] = fmt.Sprintf(`
SELECT key, busy, idle, waiting, spare FROM (
    SELECT %[3]s AS key,
           coalesce(sum(gpu_minutes) FILTER (WHERE state = 'busy'), 0)::bigint AS busy,
           coalesce(sum(gpu_minutes) FILTER (WHERE state = 'allocated_idle'), 0)::bigint AS idle,
           coalesce(sum(gpu_minutes) FILTER (WHERE state = 'unallocated_waiting'), 0)::bigint AS waiting,
           coalesce(sum(gpu_minutes) FILTER (WHERE state = 'spare'), 0)::bigint AS spare
    FROM %[1]s
    WHERE %[2]s >= $1 AND %[2]s < $2`+where+`
    GROUP BY 1
) g
ORDER BY idle + waiting DESC, key
LIMIT $8 OFFSET $9`, src.table, src.col, expr)
			}
			if !src.node {
				continue
			}
			usageHeatmapSQL[key] = fmt.Sprintf(`
WITH page AS (
    SELECT DISTINCT node FROM %[1]s
    WHERE %[2]s >= $1 AND %[2]s < $2 AND node > $8`+where+`
    ORDER BY node LIMIT $9
)
SELECT node, %[2]s, max(gpu_model),
       coalesce(sum(gpu_minutes) FILTER (WHERE state = 'busy'), 0)::bigint,
       coalesce(sum(gpu_minutes) FILTER (WHERE state = 'allocated_idle'), 0)::bigint,
       coalesce(sum(gpu_minutes) FILTER (WHERE state = 'unallocated_waiting'), 0)::bigint,
       coalesce(sum(gpu_minutes) FILTER (WHERE state = 'spare'), 0)::bigint
FROM %[1]s
WHERE %[2]s >= $1 AND %[2]s < $2 AND node IN (SELECT node FROM page)`+where+`
GROUP BY 1, 2 ORDER BY 1, 2`, src.table, src.col)
		}
	}
}

// customPlan runs a dashboard read as an unnamed statement, so Postgres
// plans it for this request's filters. A cached generic plan cannot know
// which of the optional filters are empty, misjudges how many rows match
// and, measured, sorts a month of rows on disk instead of hashing them.
const customPlan = pgx.QueryExecModeCacheDescribe

// UsageMinutes is GPU-minutes per idle category.
type UsageMinutes struct {
	Busy               int64
	AllocatedIdle      int64
	UnallocatedWaiting int64
	Spare              int64
}

func (m *UsageMinutes) add(state string, v int64) {
	switch state {
	case "busy":
		m.Busy += v
	case "allocated_idle":
		m.AllocatedIdle += v
	case "unallocated_waiting":
		m.UnallocatedWaiting += v
	case "spare":
		m.Spare += v
	}
}

// Total is every GPU-minute counted.
func (m UsageMinutes) Total() int64 { return m.Busy + m.AllocatedIdle + m.UnallocatedWaiting + m.Spare }

// IdleShare is the wasted share: held but idle, or free while work waited.
func (m UsageMinutes) IdleShare() float64 {
	if m.Total() == 0 {
		return 0
	}
	return float64(m.AllocatedIdle+m.UnallocatedWaiting) / float64(m.Total())
}

// UsagePoint is one time bucket of GPU usage.
type UsagePoint struct {
	Time time.Time
	UsageMinutes
}

// UsageSeries returns GPU-minutes per state for each bucket of res in the
// filter's range, oldest first. Buckets with no data are absent.
func (s *Store) UsageSeries(ctx context.Context, f UsageFilter, res Resolution) ([]UsagePoint, error) {
	q := usageSeriesSQL[usageKey{res, f.pick(false, false)}]
	rows, err := s.pool.Query(ctx, q, append([]any{customPlan}, f.args()...)...)
	if err != nil {
		return nil, fmt.Errorf("read GPU usage series: %w", err)
	}
	defer rows.Close()
	var out []UsagePoint
	for rows.Next() {
		var t time.Time
		var state string
		var v int64
		if err := rows.Scan(&t, &state, &v); err != nil {
			return nil, fmt.Errorf("read GPU usage series: %w", err)
		}
		if len(out) == 0 || !out[len(out)-1].Time.Equal(t) {
			out = append(out, UsagePoint{Time: t})
		}
		out[len(out)-1].add(state, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read GPU usage series: %w", err)
	}
	return out, nil
}

// UsageGroup is GPU usage of one group (a node, namespace, queue...).
type UsageGroup struct {
	Key string
	UsageMinutes
}

// UsageByGroup returns GPU-minutes per state for each group of dim, most
// wasted first, limit groups starting at offset.
func (s *Store) UsageByGroup(ctx context.Context, f UsageFilter, res Resolution, dim Dimension, limit, offset int) ([]UsageGroup, error) {
	q, ok := usageGroupsSQL[usageKey{res, f.pick(dim == ByNode, dim == ByNamespace || dim == ByQueue)}][dim]
	if !ok {
		return nil, fmt.Errorf("read GPU usage by %q: not a dimension", dim)
	}
	rows, err := s.pool.Query(ctx, q, append([]any{customPlan}, append(f.args(), limit, offset)...)...)
	if err != nil {
		return nil, fmt.Errorf("read GPU usage by %s: %w", dim, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (UsageGroup, error) {
		var g UsageGroup
		err := r.Scan(&g.Key, &g.Busy, &g.AllocatedIdle, &g.UnallocatedWaiting, &g.Spare)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("read GPU usage by %s: %w", dim, err)
	}
	return out, nil
}

// HeatCell is one node in one bucket.
type HeatCell struct {
	Node     string
	GPUModel string
	Time     time.Time
	UsageMinutes
}

// UsageHeatmap returns per-node, per-bucket GPU usage for up to limit nodes
// whose names sort after afterNode, ordered by node then time.
func (s *Store) UsageHeatmap(ctx context.Context, f UsageFilter, res Resolution, afterNode string, limit int) ([]HeatCell, error) {
	q := usageHeatmapSQL[usageKey{res, f.pick(true, false)}]
	rows, err := s.pool.Query(ctx, q, append([]any{customPlan}, append(f.args(), afterNode, limit)...)...)
	if err != nil {
		return nil, fmt.Errorf("read node heatmap: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (HeatCell, error) {
		var c HeatCell
		err := r.Scan(&c.Node, &c.Time, &c.GPUModel, &c.Busy, &c.AllocatedIdle, &c.UnallocatedWaiting, &c.Spare)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read node heatmap: %w", err)
	}
	return out, nil
}

// IdleHolder is a job (or a lone pod) that held GPUs while they idled.
type IdleHolder struct {
	JobUID      string
	Namespace   string
	Name        string // the job's name, or the pod's when it has no job
	Queue       string
	Pods        int
	Nodes       int
	IdleMinutes int64
	BusyMinutes int64
}

// IdleHolders ranks holders by allocated-but-idle GPU-minutes in the
// filter's range (whole hours), limit of them starting at offset. A range
// of whole days is read from the daily table, any other from the hourly.
func (s *Store) IdleHolders(ctx context.Context, f UsageFilter, limit, offset int) ([]IdleHolder, error) {
	q := idleHoldersSQL[Hourly]
	if f.From.Equal(truncDay(f.From)) && f.To.Equal(truncDay(f.To)) {
		q = idleHoldersSQL[Daily]
	}
	rows, err := s.pool.Query(ctx, q, append([]any{customPlan}, append(f.args(), limit, offset)...)...)
	if err != nil {
		return nil, fmt.Errorf("read idle GPU holders: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (IdleHolder, error) {
		var h IdleHolder
		err := r.Scan(&h.JobUID, &h.Namespace, &h.Name, &h.Queue, &h.Pods, &h.Nodes, &h.IdleMinutes, &h.BusyMinutes)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("read idle GPU holders: %w", err)
	}
	return out, nil
}

// idleHoldersSQL ranks holders with plain sums (a hash aggregate over the
// range), then counts distinct pods and nodes for the page alone, through
// the job index for jobs and the pod index for lone pods: counting them for
// every holder sorted the whole range. A lateral branch whose condition on
// the holder is false is skipped without reading its index.
var idleHoldersSQL = map[Resolution]string{}

func init() {
	holders := usageSource{node: true, tenant: true}
	for res, tc := range map[Resolution][2]string{Hourly: {"gpu_holder_hours", "hour"}, Daily: {"gpu_holder_days", "day"}} {
		idleHoldersSQL[res] = fmt.Sprintf(`
WITH ranked AS (
    SELECT job_uid, pod_namespace, CASE WHEN job_uid = '' THEN pod_name ELSE '' END AS lone_pod,
           max(queue) AS queue, sum(idle_minutes)::bigint AS idle, sum(busy_minutes)::bigint AS busy
    FROM %[1]s
    WHERE %[2]s >= $1 AND %[2]s < $2`+usageWhere(holders)+`
    GROUP BY 1, 2, 3
    HAVING sum(idle_minutes) > 0
    ORDER BY idle DESC, job_uid, pod_namespace, lone_pod
    LIMIT $8 OFFSET $9
)
SELECT r.job_uid, r.pod_namespace, coalesce(j.name, r.lone_pod), r.queue, c.pods, c.nodes, r.idle, r.busy
FROM ranked r
CROSS JOIN LATERAL (
    SELECT count(DISTINCT pod_name)::int AS pods, count(DISTINCT node)::int AS nodes FROM (
        SELECT pod_name, node FROM %[1]s
        WHERE r.job_uid <> '' AND job_uid = r.job_uid AND pod_namespace = r.pod_namespace
          AND %[2]s >= $1 AND %[2]s < $2`+usageWhere(holders)+`
        UNION ALL
        SELECT pod_name, node FROM %[1]s
        WHERE r.job_uid = '' AND pod_namespace = r.pod_namespace AND pod_name = r.lone_pod AND job_uid = ''
          AND %[2]s >= $1 AND %[2]s < $2`+usageWhere(holders)+`
    ) held
) c
LEFT JOIN jobs j ON j.uid = r.job_uid AND r.job_uid <> ''
ORDER BY r.idle DESC, r.job_uid, r.pod_namespace, r.lone_pod`, tc[0], tc[1])
	}
}

// WaitFilter narrows the cluster-wide wait reason queries.
type WaitFilter struct {
	From, To   time.Time
	Namespaces []string
	Queues     []string
}

// WaitPoint is pod-seconds of waiting per reason in one bucket.
type WaitPoint struct {
	Time    time.Time
	Seconds map[string]float64
}

// WaitReasonSeries returns, per bucket of res, how many pod-seconds were
// spent waiting for each reason category, oldest first.
func (s *Store) WaitReasonSeries(ctx context.Context, f WaitFilter, res Resolution) ([]WaitPoint, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT date_bin($5::interval, hour, timestamptz '2000-01-01 00:00:00+00'), category, sum(pod_seconds)
		FROM wait_reason_hours
		WHERE hour >= $1 AND hour < $2
		  AND (cardinality($3::text[]) = 0 OR pod_namespace = ANY($3::text[]))
		  AND (cardinality($4::text[]) = 0 OR queue = ANY($4::text[]))
		GROUP BY 1, 2 ORDER BY 1, 2`,
		f.From, f.To, orNone(f.Namespaces), orNone(f.Queues), res.Duration())
	if err != nil {
		return nil, fmt.Errorf("read wait reason series: %w", err)
	}
	defer rows.Close()
	var out []WaitPoint
	for rows.Next() {
		var t time.Time
		var category string
		var v float64
		if err := rows.Scan(&t, &category, &v); err != nil {
			return nil, fmt.Errorf("read wait reason series: %w", err)
		}
		if len(out) == 0 || !out[len(out)-1].Time.Equal(t) {
			out = append(out, WaitPoint{Time: t, Seconds: map[string]float64{}})
		}
		out[len(out)-1].Seconds[category] += v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read wait reason series: %w", err)
	}
	return out, nil
}

// ReasonTotal is one reason category's share of all waiting in a range.
type ReasonTotal struct {
	Category string
	Seconds  float64
	// MaxPods is the most pods that waited for this reason in any one hour.
	MaxPods int
}

// WaitReasonTotals ranks reason categories by pod-seconds of waiting.
func (s *Store) WaitReasonTotals(ctx context.Context, f WaitFilter) ([]ReasonTotal, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT category, sum(pod_seconds), max(pods)
		FROM wait_reason_hours
		WHERE hour >= $1 AND hour < $2
		  AND (cardinality($3::text[]) = 0 OR pod_namespace = ANY($3::text[]))
		  AND (cardinality($4::text[]) = 0 OR queue = ANY($4::text[]))
		GROUP BY 1 ORDER BY 2 DESC, 1`,
		f.From, f.To, orNone(f.Namespaces), orNone(f.Queues))
	if err != nil {
		return nil, fmt.Errorf("read wait reason totals: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReasonTotal, error) {
		var t ReasonTotal
		err := r.Scan(&t.Category, &t.Seconds, &t.MaxPods)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("read wait reason totals: %w", err)
	}
	return out, nil
}
