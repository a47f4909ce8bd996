-- Smaller rollups beside those of 00003, so a dashboard request over 30 days
-- of 1,000 GPUs adds up thousands of rows, not hundreds of thousands. Each
-- drops a dimension the request does not ask for:
--   gpu_node_hours / gpu_node_days      GPU-minutes per node and state (no
--                                       namespace or queue): the heatmap,
--                                       group-by-node and node filters
--   gpu_tenant_hours / gpu_tenant_days  GPU-minutes per GPU model, namespace,
--                                       queue and state (no node): totals,
--                                       group-by namespace/queue/model/cluster
--   gpu_holder_days                     gpu_holder_hours per day: idle holders
--                                       over whole days
-- Store.RollupDashboard recomputes them with the tables they are summed from;
-- each is exactly the sum of its source over the same hours or days, so a
-- request may read whichever has the columns it filters and groups by.
-- Job and pod search by name prefix gets pattern indexes.

-- +goose Up

CREATE TABLE gpu_node_hours (
    hour         timestamptz NOT NULL,
    node         text        NOT NULL,
    gpu_model    text        NOT NULL DEFAULT '',
    state        text        NOT NULL CHECK (state IN ('busy', 'allocated_idle', 'unallocated_waiting', 'spare')),
    gpu_minutes  integer     NOT NULL CHECK (gpu_minutes >= 0),
    PRIMARY KEY (hour, node, state)
);
-- A heatmap page reads a few nodes across the range from the index alone.
CREATE INDEX gpu_node_hours_node_hour_idx ON gpu_node_hours (node, hour) INCLUDE (state, gpu_minutes, gpu_model);

CREATE TABLE gpu_node_days (
    day          timestamptz NOT NULL,
    node         text        NOT NULL,
    gpu_model    text        NOT NULL DEFAULT '',
    state        text        NOT NULL CHECK (state IN ('busy', 'allocated_idle', 'unallocated_waiting', 'spare')),
    gpu_minutes  integer     NOT NULL CHECK (gpu_minutes >= 0),
    PRIMARY KEY (day, node, state)
);
CREATE INDEX gpu_node_days_node_day_idx ON gpu_node_days (node, day) INCLUDE (state, gpu_minutes, gpu_model);

CREATE TABLE gpu_tenant_hours (
    hour           timestamptz NOT NULL,
    gpu_model      text        NOT NULL DEFAULT '',
    pod_namespace  text        NOT NULL DEFAULT '',
    queue          text        NOT NULL DEFAULT '',
    state          text        NOT NULL CHECK (state IN ('busy', 'allocated_idle', 'unallocated_waiting', 'spare')),
    gpu_minutes    integer     NOT NULL CHECK (gpu_minutes >= 0),
    PRIMARY KEY (hour, gpu_model, pod_namespace, queue, state)
);

CREATE TABLE gpu_tenant_days (
    day            timestamptz NOT NULL,
    gpu_model      text        NOT NULL DEFAULT '',
    pod_namespace  text        NOT NULL DEFAULT '',
    queue          text        NOT NULL DEFAULT '',
    state          text        NOT NULL CHECK (state IN ('busy', 'allocated_idle', 'unallocated_waiting', 'spare')),
    gpu_minutes    bigint      NOT NULL CHECK (gpu_minutes >= 0),
    PRIMARY KEY (day, gpu_model, pod_namespace, queue, state)
);

-- A pod name may belong to different jobs within one day (names are
-- reused), so the job and queue are part of the key. Minutes of one node's
-- GPUs in one day fit an integer, whose sums aggregate faster than bigint's.
CREATE TABLE gpu_holder_days (
    day            timestamptz NOT NULL,
    node           text        NOT NULL,
    gpu_model      text        NOT NULL DEFAULT '',
    pod_namespace  text        NOT NULL,
    pod_name       text        NOT NULL,
    job_uid        text        NOT NULL DEFAULT '',
    queue          text        NOT NULL DEFAULT '',
    busy_minutes   integer     NOT NULL CHECK (busy_minutes >= 0),
    idle_minutes   integer     NOT NULL CHECK (idle_minutes >= 0),
    PRIMARY KEY (day, node, pod_namespace, pod_name, job_uid, queue)
);
CREATE INDEX gpu_holder_days_job_idx ON gpu_holder_days (job_uid, pod_namespace, day) INCLUDE (pod_name, node);
CREATE INDEX gpu_holder_days_pod_idx ON gpu_holder_days (pod_namespace, pod_name, day) INCLUDE (node);
-- Counting a top holder's pods and nodes reads the index alone.
CREATE INDEX gpu_holder_hours_job_ns_idx ON gpu_holder_hours (job_uid, pod_namespace, hour) INCLUDE (pod_name, node);

-- FindWorkloads matches names by prefix with explicit byte-order bounds.
CREATE INDEX pods_name_pattern_idx ON pods (name text_pattern_ops);
CREATE INDEX jobs_name_pattern_idx ON jobs (name text_pattern_ops);

-- What was rolled up before this migration.
INSERT INTO gpu_node_hours (hour, node, gpu_model, state, gpu_minutes)
SELECT hour, node, max(gpu_model), state, sum(gpu_minutes) FROM gpu_usage_hours GROUP BY hour, node, state;
INSERT INTO gpu_node_days (day, node, gpu_model, state, gpu_minutes)
SELECT day, node, max(gpu_model), state, sum(gpu_minutes) FROM gpu_usage_days GROUP BY day, node, state;
INSERT INTO gpu_tenant_hours (hour, gpu_model, pod_namespace, queue, state, gpu_minutes)
SELECT hour, gpu_model, pod_namespace, queue, state, sum(gpu_minutes) FROM gpu_usage_hours
GROUP BY hour, gpu_model, pod_namespace, queue, state;
INSERT INTO gpu_tenant_days (day, gpu_model, pod_namespace, queue, state, gpu_minutes)
SELECT day, gpu_model, pod_namespace, queue, state, sum(gpu_minutes) FROM gpu_usage_days
GROUP BY day, gpu_model, pod_namespace, queue, state;
INSERT INTO gpu_holder_days (day, node, gpu_model, pod_namespace, pod_name, job_uid, queue, busy_minutes, idle_minutes)
SELECT date_trunc('day', hour, 'UTC'), node, max(gpu_model), pod_namespace, pod_name, job_uid, queue,
       sum(busy_minutes), sum(idle_minutes)
FROM gpu_holder_hours GROUP BY 1, node, pod_namespace, pod_name, job_uid, queue;

-- +goose Down

DROP INDEX jobs_name_pattern_idx;
DROP INDEX pods_name_pattern_idx;
DROP INDEX gpu_holder_hours_job_ns_idx;
DROP TABLE gpu_holder_days;
DROP TABLE gpu_tenant_days;
DROP TABLE gpu_tenant_hours;
DROP TABLE gpu_node_days;
DROP TABLE gpu_node_hours;
