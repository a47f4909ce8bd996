-- What the dashboard and the JSON API read, so no request scans raw samples,
-- per-minute rows or the whole attempt history:
--   gpu_holder_hours   held GPU-minutes per hour and holder (pod, its job and
--                      queue): top idle holders and per-queue/per-job splits
--   gpu_usage_hours    GPU-minutes per hour x node x namespace x queue x state
--   gpu_usage_days     the same per day, for ranges longer than a few days
--   wait_reason_hours  pod-seconds of waiting per hour x reason x queue x namespace
-- All are recomputed by Store.RollupDashboard for the hours it is given, after
-- RollupStates; re-running it gives the same rows.

-- +goose Up

CREATE TABLE gpu_holder_hours (
    hour           timestamptz NOT NULL,
    node           text        NOT NULL,
    gpu_model      text        NOT NULL DEFAULT '',
    pod_namespace  text        NOT NULL,
    pod_name       text        NOT NULL,
    job_uid        text        NOT NULL DEFAULT '',
    queue          text        NOT NULL DEFAULT '',
    busy_minutes   integer     NOT NULL CHECK (busy_minutes >= 0),
    idle_minutes   integer     NOT NULL CHECK (idle_minutes >= 0),
    PRIMARY KEY (hour, node, pod_namespace, pod_name)
);
CREATE INDEX gpu_holder_hours_job_idx ON gpu_holder_hours (job_uid, hour);
CREATE INDEX gpu_holder_hours_pod_idx ON gpu_holder_hours (pod_namespace, pod_name, hour);

CREATE TABLE gpu_usage_hours (
    hour           timestamptz NOT NULL,
    node           text        NOT NULL,
    gpu_model      text        NOT NULL DEFAULT '',
    pod_namespace  text        NOT NULL DEFAULT '',
    queue          text        NOT NULL DEFAULT '',
    state          text        NOT NULL CHECK (state IN ('busy', 'allocated_idle', 'unallocated_waiting', 'spare')),
    gpu_minutes    integer     NOT NULL CHECK (gpu_minutes >= 0),
    PRIMARY KEY (hour, node, pod_namespace, queue, state)
);
CREATE INDEX gpu_usage_hours_node_hour_idx ON gpu_usage_hours (node, hour);

CREATE TABLE gpu_usage_days (
    day            timestamptz NOT NULL,
    node           text        NOT NULL,
    gpu_model      text        NOT NULL DEFAULT '',
    pod_namespace  text        NOT NULL DEFAULT '',
    queue          text        NOT NULL DEFAULT '',
    state          text        NOT NULL CHECK (state IN ('busy', 'allocated_idle', 'unallocated_waiting', 'spare')),
    gpu_minutes    bigint      NOT NULL CHECK (gpu_minutes >= 0),
    PRIMARY KEY (day, node, pod_namespace, queue, state)
);
CREATE INDEX gpu_usage_days_node_day_idx ON gpu_usage_days (node, day);

CREATE TABLE wait_reason_hours (
    hour           timestamptz      NOT NULL,
    category       text             NOT NULL,
    queue          text             NOT NULL DEFAULT '',
    pod_namespace  text             NOT NULL DEFAULT '',
    pod_seconds    double precision NOT NULL CHECK (pod_seconds >= 0),
    pods           integer          NOT NULL CHECK (pods >= 0),
    PRIMARY KEY (hour, category, queue, pod_namespace)
);

-- +goose Down

DROP TABLE wait_reason_hours;
DROP TABLE gpu_usage_days;
DROP TABLE gpu_usage_hours;
DROP TABLE gpu_holder_hours;
