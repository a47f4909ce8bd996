-- What the dashboards read: GPU time by idle category, each pod's wait broken
-- down by reason, and each job's JCT. Raw samples are never scanned by a
-- dashboard: the collector rolls minutes into these tables as it goes.

-- +goose Up

-- GPU demand that was waiting in each minute: GPUs requested by pods that
-- existed but were not yet bound. Without it, an idle GPU is only "spare";
-- with it, the first pending_gpus free GPUs of a minute count as
-- "unallocated while demand waits".
CREATE TABLE gpu_demand_minutes (
    minute        timestamptz PRIMARY KEY,
    pending_gpus  real    NOT NULL CHECK (pending_gpus >= 0),
    pending_pods  integer NOT NULL CHECK (pending_pods >= 0)
);

-- GPU-minutes per hour, node, holder namespace and state. States:
--   busy                 held by a pod and active (engine activity >= threshold)
--   allocated_idle       held by a pod but below the activity threshold
--   unallocated_waiting  free while GPU demand waited
--   spare                free with no demand waiting
CREATE TABLE gpu_state_hours (
    hour           timestamptz NOT NULL,
    node           text        NOT NULL,
    gpu_model      text        NOT NULL DEFAULT '',
    pod_namespace  text        NOT NULL DEFAULT '',
    state          text        NOT NULL CHECK (state IN ('busy', 'allocated_idle', 'unallocated_waiting', 'spare')),
    gpu_minutes    integer     NOT NULL CHECK (gpu_minutes >= 0),
    PRIMARY KEY (hour, node, pod_namespace, state)
);
CREATE INDEX gpu_state_hours_state_hour_idx ON gpu_state_hours (state, hour);
CREATE INDEX gpu_state_hours_model_hour_idx ON gpu_state_hours (gpu_model, hour);

-- One row per waiting interval of a pod: from creation (or an attempt) to
-- the next attempt (or binding), labelled by the reason the scheduler gave
-- at its start. "not_attempted" is time before the first attempt.
CREATE VIEW pod_wait_intervals AS
WITH marks AS (
    SELECT a.pod_uid, a.at, a.category, a.reasons, a.message, a.total_nodes
    FROM scheduling_attempts a
    WHERE a.result <> 'scheduled'
), bounded AS (
    SELECT p.uid AS pod_uid, p.created_at AS at, 'not_attempted'::text AS category,
           '{}'::jsonb AS reasons, ''::text AS message, 0 AS total_nodes
    FROM pods p
    UNION ALL
    SELECT m.* FROM marks m JOIN pods p ON p.uid = m.pod_uid
    WHERE m.at >= p.created_at AND (p.scheduled_at IS NULL OR m.at < p.scheduled_at)
)
SELECT b.pod_uid, b.at AS started_at,
       coalesce(lead(b.at) OVER w, p.scheduled_at, p.finished_at, now()) AS ended_at,
       b.category, b.reasons, b.message, b.total_nodes
FROM bounded b JOIN pods p ON p.uid = b.pod_uid
WINDOW w AS (PARTITION BY b.pod_uid ORDER BY b.at, b.category);

-- Seconds each pod waited, per reason category.
CREATE VIEW pod_wait_breakdown AS
SELECT pod_uid, category, sum(extract(epoch FROM ended_at - started_at))::double precision AS seconds
FROM pod_wait_intervals
WHERE ended_at > started_at
GROUP BY pod_uid, category;

-- JCT = queueing (created -> admitted) + running (admitted -> finished).
CREATE VIEW job_jct AS
SELECT uid, namespace, name, kind, queue, priority, min_member, gpus_per_member, gpu_milli_per_member,
       created_at, admitted_at, finished_at, phase,
       extract(epoch FROM coalesce(admitted_at, first_scheduled_at) - created_at)::double precision AS queue_seconds,
       extract(epoch FROM finished_at - coalesce(admitted_at, first_scheduled_at))::double precision AS run_seconds,
       extract(epoch FROM finished_at - created_at)::double precision AS jct_seconds
FROM jobs;

-- +goose Down

DROP VIEW job_jct;
DROP VIEW pod_wait_breakdown;
DROP VIEW pod_wait_intervals;
DROP TABLE gpu_state_hours;
DROP TABLE gpu_demand_minutes;
