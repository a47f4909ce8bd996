-- The first schema: cluster inventory, workload lifecycle, what the scheduler
-- said, raw events, GPU telemetry (time-partitioned, with a per-minute rollup)
-- and tuned profiles.
--
-- Portability: only plain PostgreSQL features (declarative partitioning, jsonb,
-- GIN/BRIN indexes), no extensions, so the same DDL runs on Citus or
-- TimescaleDB. Every unique key on a partitioned table contains its partition
-- key, as both require.

-- +goose Up

CREATE TABLE nodes (
    name        text PRIMARY KEY,
    labels      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- topology level key -> value at that level, e.g. {"topology.schedloop.io/rack": "r1"}
    topology    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    gpu_model   text        NOT NULL DEFAULT '',
    gpu_count   integer     NOT NULL DEFAULT 0 CHECK (gpu_count >= 0),
    cpu_milli   bigint      NOT NULL DEFAULT 0 CHECK (cpu_milli >= 0),
    memory_mib  bigint      NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),
    ready       boolean     NOT NULL DEFAULT false,
    first_seen  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now()
);
-- Dashboards group idle time by GPU model and filter by topology level values.
CREATE INDEX nodes_gpu_model_idx ON nodes (gpu_model);
CREATE INDEX nodes_topology_gin_idx ON nodes USING gin (topology jsonb_path_ops);

CREATE TABLE gpus (
    uuid           text PRIMARY KEY,
    node           text    NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    gpu_index      integer NOT NULL CHECK (gpu_index >= 0),
    model          text    NOT NULL DEFAULT '',
    nvlink_domain  text    NOT NULL DEFAULT '',
    mig_profile    text    NOT NULL DEFAULT ''
);
-- A MIG-partitioned GPU has several instances with the same index.
CREATE UNIQUE INDEX gpus_node_index_mig_key ON gpus (node, gpu_index, uuid);
CREATE INDEX gpus_nvlink_domain_idx ON gpus (node, nvlink_domain);

CREATE TABLE jobs (
    uid                   text PRIMARY KEY,
    namespace             text        NOT NULL,
    name                  text        NOT NULL,
    kind                  text        NOT NULL CHECK (kind IN ('gang', 'pod')),
    queue                 text        NOT NULL DEFAULT '',
    priority              integer     NOT NULL DEFAULT 0,
    min_member            integer     NOT NULL DEFAULT 1 CHECK (min_member >= 1),
    gpus_per_member       integer     NOT NULL DEFAULT 0 CHECK (gpus_per_member >= 0),
    gpu_milli_per_member  integer     NOT NULL DEFAULT 0 CHECK (gpu_milli_per_member BETWEEN 0 AND 1000),
    created_at            timestamptz NOT NULL,
    first_scheduled_at    timestamptz,
    admitted_at           timestamptz,
    started_at            timestamptz,
    finished_at           timestamptz,
    phase                 text        NOT NULL DEFAULT 'Pending'
);
CREATE INDEX jobs_namespace_name_idx ON jobs (namespace, name);
-- JCT and queueing dashboards scan jobs by time range, optionally per queue.
CREATE INDEX jobs_created_at_idx ON jobs (created_at);
CREATE INDEX jobs_queue_created_at_idx ON jobs (queue, created_at);
-- "What is waiting now" is a scan of unfinished jobs only.
CREATE INDEX jobs_unfinished_idx ON jobs (created_at) WHERE finished_at IS NULL;

CREATE TABLE pods (
    uid             text PRIMARY KEY,
    namespace       text        NOT NULL,
    name            text        NOT NULL,
    -- No foreign key: informers may deliver a pod before its PodGroup.
    job_uid         text,
    queue           text        NOT NULL DEFAULT '',
    priority        integer     NOT NULL DEFAULT 0,
    scheduler_name  text        NOT NULL DEFAULT '',
    gpus            integer     NOT NULL DEFAULT 0 CHECK (gpus >= 0),
    gpu_milli       integer     NOT NULL DEFAULT 0 CHECK (gpu_milli BETWEEN 0 AND 1000),
    node            text        NOT NULL DEFAULT '',
    gpu_uuids       text[]      NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL,
    scheduled_at    timestamptz,
    started_at      timestamptz,
    finished_at     timestamptz,
    phase           text        NOT NULL DEFAULT 'Pending'
);
-- The "why did it wait" search finds pods by name.
CREATE INDEX pods_namespace_name_idx ON pods (namespace, name);
CREATE INDEX pods_job_uid_idx ON pods (job_uid);
-- Joining GPU minutes to the pod that held them: node + run interval.
CREATE INDEX pods_node_started_idx ON pods (node, started_at);
CREATE INDEX pods_created_at_idx ON pods (created_at);
CREATE INDEX pods_unfinished_idx ON pods (created_at) WHERE finished_at IS NULL;

CREATE TABLE scheduling_attempts (
    id           bigserial   PRIMARY KEY,
    -- source event UID + its count: replaying the same event adds nothing
    attempt_key  text        NOT NULL UNIQUE,
    pod_uid      text        NOT NULL,
    at           timestamptz NOT NULL,
    result       text        NOT NULL CHECK (result IN ('scheduled', 'unschedulable', 'waiting', 'preempted', 'error')),
    category     text        NOT NULL DEFAULT 'other',
    total_nodes  integer     NOT NULL DEFAULT 0 CHECK (total_nodes >= 0),
    -- reason text -> number of nodes that gave it
    reasons      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    message      text        NOT NULL DEFAULT ''
);
-- A pod's wait timeline reads its attempts in order.
CREATE INDEX scheduling_attempts_pod_at_idx ON scheduling_attempts (pod_uid, at);
-- The cluster-wide "top wait reasons over time" view.
CREATE INDEX scheduling_attempts_at_category_idx ON scheduling_attempts (at, category);

CREATE TABLE k8s_events (
    uid            text PRIMARY KEY,
    namespace      text        NOT NULL DEFAULT '',
    involved_kind  text        NOT NULL DEFAULT '',
    involved_name  text        NOT NULL DEFAULT '',
    involved_uid   text        NOT NULL DEFAULT '',
    reason         text        NOT NULL DEFAULT '',
    type           text        NOT NULL DEFAULT '',
    message        text        NOT NULL DEFAULT '',
    source         text        NOT NULL DEFAULT '',
    count          integer     NOT NULL DEFAULT 1 CHECK (count >= 0),
    first_seen     timestamptz NOT NULL,
    last_seen      timestamptz NOT NULL
);
CREATE INDEX k8s_events_involved_idx ON k8s_events (involved_uid, last_seen);
CREATE INDEX k8s_events_reason_last_seen_idx ON k8s_events (reason, last_seen);

-- Raw telemetry: one row per GPU per scrape. Partitioned by day so retention
-- is a DROP of old partitions, not a DELETE; partitions are created ahead of
-- ingest by the store. The default partition keeps rows that arrive for a day
-- nobody prepared, so nothing is lost.
CREATE TABLE gpu_samples (
    ts                timestamptz      NOT NULL,
    gpu_uuid          text             NOT NULL,
    node              text             NOT NULL DEFAULT '',
    gpu_index         smallint         NOT NULL DEFAULT 0,
    pod_namespace     text             NOT NULL DEFAULT '',
    pod_name          text             NOT NULL DEFAULT '',
    container         text             NOT NULL DEFAULT '',
    gpu_util          real             NOT NULL DEFAULT 0,
    gr_engine_active  real             NOT NULL DEFAULT 0,
    sm_active         real             NOT NULL DEFAULT 0,
    fb_used_mib       real             NOT NULL DEFAULT 0,
    power_w           real             NOT NULL DEFAULT 0
) PARTITION BY RANGE (ts);
CREATE TABLE gpu_samples_default PARTITION OF gpu_samples DEFAULT;
-- The rollup reads a time range; per-GPU drill-down reads one GPU's range.
CREATE INDEX gpu_samples_ts_brin_idx ON gpu_samples USING brin (ts);
CREATE INDEX gpu_samples_gpu_ts_idx ON gpu_samples (gpu_uuid, ts);

-- Per-minute rollup that every dashboard reads instead of raw samples:
-- 30 days x 1,000 GPUs is 43M rows here versus billions of raw samples.
CREATE TABLE gpu_minutes (
    minute               timestamptz NOT NULL,
    gpu_uuid             text        NOT NULL,
    node                 text        NOT NULL DEFAULT '',
    pod_namespace        text        NOT NULL DEFAULT '',
    pod_name             text        NOT NULL DEFAULT '',
    samples              integer     NOT NULL CHECK (samples > 0),
    gpu_util_avg         real        NOT NULL DEFAULT 0,
    gr_engine_active_avg real        NOT NULL DEFAULT 0,
    sm_active_avg        real        NOT NULL DEFAULT 0,
    fb_used_mib_max      real        NOT NULL DEFAULT 0,
    power_w_avg          real        NOT NULL DEFAULT 0,
    PRIMARY KEY (gpu_uuid, minute)
);
CREATE INDEX gpu_minutes_minute_idx ON gpu_minutes (minute);
-- The nodes x time heatmap and per-node idle share.
CREATE INDEX gpu_minutes_node_minute_idx ON gpu_minutes (node, minute);
-- Top idle holders: which pod held a GPU in a minute.
CREATE INDEX gpu_minutes_pod_idx ON gpu_minutes (pod_namespace, pod_name, minute) WHERE pod_name <> '';

CREATE TABLE profiles (
    id                    bigserial   PRIMARY KEY,
    name                  text        NOT NULL,
    status                text        NOT NULL DEFAULT 'proposed'
                          CHECK (status IN ('proposed', 'applied', 'rolled_back', 'rejected', 'superseded')),
    weights               jsonb       NOT NULL DEFAULT '{}'::jsonb,
    queue_limits          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    gang_timeout_seconds  integer     NOT NULL DEFAULT 0 CHECK (gang_timeout_seconds >= 0),
    evidence              jsonb       NOT NULL DEFAULT '{}'::jsonb,
    predicted             jsonb       NOT NULL DEFAULT '{}'::jsonb,
    measured              jsonb       NOT NULL DEFAULT '{}'::jsonb,
    parent_id             bigint      REFERENCES profiles (id) ON DELETE SET NULL,
    reason                text        NOT NULL DEFAULT '',
    created_at            timestamptz NOT NULL DEFAULT now(),
    applied_at            timestamptz
);
CREATE UNIQUE INDEX profiles_name_key ON profiles (name);
-- The profiles page lists history newest first, optionally by status.
CREATE INDEX profiles_status_created_idx ON profiles (status, created_at DESC);
CREATE INDEX profiles_created_idx ON profiles (created_at DESC);

-- +goose Down

DROP TABLE profiles;
DROP TABLE gpu_minutes;
DROP TABLE gpu_samples;
DROP TABLE k8s_events;
DROP TABLE scheduling_attempts;
DROP TABLE pods;
DROP TABLE jobs;
DROP TABLE gpus;
DROP TABLE nodes;
