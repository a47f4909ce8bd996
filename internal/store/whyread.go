package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/schedloop/schedloop"
)

// Reads behind "why did it wait": find a pod or job, its waiting
// intervals, its gang's members and the GPU activity while it ran.

// Match is one pod or job found by a search.
type Match struct {
	Kind      string // "pod" or "job"
	UID       string
	Namespace string
	Name      string
	Phase     string
	Created   time.Time
}

// FindWorkloads finds pods and jobs whose UID equals query, whose
// "namespace/name" equals it, or whose name (or namespace/name) starts with
// it. Results are ordered by kind (jobs first), namespace, name and uid;
// afterKey (the last result's SortKey) resumes a previous page. Planned
// for each query (customPlan), the prefix becomes a range scan of the name
// pattern indexes; a generic plan would read every pod.
func (s *Store) FindWorkloads(ctx context.Context, query, afterKey string, limit int) ([]Match, error) {
	return s.FindWorkloadsOfKind(ctx, "", query, afterKey, limit)
}

// FindWorkloadsOfKind is FindWorkloads of only pods (kind "pod") or only
// jobs ("job"); "" finds both.
func (s *Store) FindWorkloadsOfKind(ctx context.Context, kind, query, afterKey string, limit int) ([]Match, error) {
	ns, name, hasNS := strings.Cut(query, "/")
	if !hasNS {
		ns, name = "", query
	}
	prefix := escapeLike(name) + "%"
	rows, err := s.pool.Query(ctx, `
		SELECT kind, uid, namespace, name, phase, created_at FROM (
		    SELECT 'job' AS kind, uid, namespace, name, phase, created_at FROM jobs
		    WHERE uid = $1 OR (($2 = '' OR namespace = $2) AND name LIKE $3)
		    UNION ALL
		    SELECT 'pod', uid, namespace, name, phase, created_at FROM pods
		    WHERE uid = $1 OR (($2 = '' OR namespace = $2) AND name LIKE $3)
		) m
		WHERE kind || '/' || namespace || '/' || name || '/' || uid > $4 AND ($6 = '' OR kind = $6)
		ORDER BY kind || '/' || namespace || '/' || name || '/' || uid
		LIMIT $5`, customPlan, query, ns, prefix, afterKey, limit, kind)
	if err != nil {
		return nil, fmt.Errorf("search pods and jobs for %q: %w", query, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Match, error) {
		var m Match
		err := r.Scan(&m.Kind, &m.UID, &m.Namespace, &m.Name, &m.Phase, &m.Created)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("search pods and jobs for %q: %w", query, err)
	}
	return out, nil
}

// SortKey is the position of m in FindWorkloads' order.
func (m Match) SortKey() string { return m.Kind + "/" + m.Namespace + "/" + m.Name + "/" + m.UID }

func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// WaitInterval is one stretch of a pod's wait, labelled with the reason the
// scheduler gave at its start.
type WaitInterval struct {
	Start, End time.Time
	Category   string
	Reasons    map[string]int
	Message    string
	TotalNodes int
}

// PodWaitIntervals returns a pod's waiting intervals in time order, from
// the pod_wait_intervals view.
func (s *Store) PodWaitIntervals(ctx context.Context, podUID string) ([]WaitInterval, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT started_at, ended_at, category, reasons, message, total_nodes
		FROM pod_wait_intervals WHERE pod_uid = $1 AND ended_at > started_at
		ORDER BY started_at, category`, podUID)
	if err != nil {
		return nil, fmt.Errorf("read wait intervals of pod %s: %w", podUID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (WaitInterval, error) {
		var w WaitInterval
		err := r.Scan(&w.Start, &w.End, &w.Category, &w.Reasons, &w.Message, &w.TotalNodes)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("read wait intervals of pod %s: %w", podUID, err)
	}
	return out, nil
}

// WaitingPods returns the pods not bound to a node and still pending, of
// jobs created since since, in one read (PodsOfJob's columns).
func (s *Store) WaitingPods(ctx context.Context, since time.Time) ([]schedloop.Pod, error) {
	return s.readPods(ctx, "waiting pods", `node = '' AND phase = 'Pending' AND finished_at IS NULL AND created_at >= $1`, since)
}

// PodsOfJob returns a job's pods ordered by name.
func (s *Store) PodsOfJob(ctx context.Context, jobUID string) ([]schedloop.Pod, error) {
	return s.readPods(ctx, "pods of job "+jobUID, `job_uid = $1`, jobUID)
}

// readPods reads the pods where holds, ordered by name.
func (s *Store) readPods(ctx context.Context, what, where string, arg any) ([]schedloop.Pod, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT uid, namespace, name, coalesce(job_uid, ''), queue, priority, scheduler_name, gpus, gpu_milli, node,
		       gpu_uuids, created_at, scheduled_at, started_at, finished_at, phase, evicted
		FROM pods WHERE `+where+` ORDER BY name, uid`, arg)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.Pod, error) {
		var p schedloop.Pod
		var phase string
		var scheduled, started, finished pgtype.Timestamptz
		err := r.Scan(&p.UID, &p.Namespace, &p.Name, &p.JobUID, &p.Queue, &p.Priority, &p.SchedulerName, &p.GPUs,
			&p.GPUMilli, &p.Node, &p.GPUUUIDs, &p.Created, &scheduled, &started, &finished, &phase, &p.Evicted)
		p.Phase = schedloop.Phase(phase)
		p.Scheduled, p.Started, p.Finished = fromNullTime(scheduled), fromNullTime(started), fromNullTime(finished)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return out, nil
}

// ActivityPoint is the GPU activity of a set of pods in one bucket.
type ActivityPoint struct {
	Time time.Time
	// GPUs is how many distinct devices the pods held in the bucket: whole
	// GPUs and MIG instances, each instance one device.
	GPUs int
	// Active is the mean engine activity (0..1; utilization for GPUs without
	// profiling metrics) over those GPU-minutes.
	Active float64
	// IdleMinutes counts held GPU-minutes below threshold.
	IdleMinutes int
}

// PodGPUActivity reads the per-minute rollup of the named pods of one
// namespace over [from, to), in buckets of step (at least a minute).
func (s *Store) PodGPUActivity(ctx context.Context, namespace string, pods []string, from, to time.Time, step time.Duration, threshold float64) ([]ActivityPoint, error) {
	step = max(step.Truncate(time.Minute), time.Minute)
	rows, err := s.pool.Query(ctx, `
		SELECT date_bin($5::interval, minute, $3), count(DISTINCT (gpu_uuid, gpu_instance)),
		       avg(greatest(gr_engine_active_avg, gpu_util_avg / 100)),
		       count(*) FILTER (WHERE greatest(gr_engine_active_avg, gpu_util_avg / 100) < $6)
		FROM gpu_minutes
		WHERE pod_namespace = $1 AND pod_name = ANY($2) AND minute >= $3 AND minute < $4
		GROUP BY 1 ORDER BY 1`, namespace, pods, from, to, step, threshold)
	if err != nil {
		return nil, fmt.Errorf("read GPU activity of %s/%v: %w", namespace, pods, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ActivityPoint, error) {
		var p ActivityPoint
		err := r.Scan(&p.Time, &p.GPUs, &p.Active, &p.IdleMinutes)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("read GPU activity of %s/%v: %w", namespace, pods, err)
	}
	return out, nil
}

// ListProfilesBefore pages through profiles newest first: those with an ID
// below beforeID (0: from the newest), optionally of one status.
func (s *Store) ListProfilesBefore(ctx context.Context, status schedloop.ProfileStatus, beforeID int64, limit int) ([]schedloop.Profile, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+profileColumns+` FROM profiles
		WHERE ($1 = '' OR status = $1) AND ($2 = 0 OR id < $2)
		ORDER BY id DESC LIMIT $3`, string(status), beforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.Profile, error) { return scanProfile(r) })
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	return out, nil
}
