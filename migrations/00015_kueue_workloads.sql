-- Kueue Workloads and the history of their admission conditions. A job
-- behind Kueue waits for quota before any of its pods reaches a scheduler;
-- these rows are where that wait is seen.

-- +goose Up

CREATE TABLE kueue_workloads (
    uid            text PRIMARY KEY,
    namespace      text NOT NULL,
    name           text NOT NULL,
    local_queue    text NOT NULL,
    cluster_queue  text NOT NULL DEFAULT '',
    flavors        jsonb NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL
);
CREATE INDEX kueue_workloads_name_idx ON kueue_workloads (namespace, name);

-- One row per observed state of a condition: the same type with another
-- status, reason or transition time is another row.
CREATE TABLE kueue_workload_conditions (
    workload_uid  text NOT NULL REFERENCES kueue_workloads (uid) ON DELETE CASCADE,
    type          text NOT NULL,
    status        text NOT NULL,
    reason        text NOT NULL,
    message       text NOT NULL,
    category      text NOT NULL,
    at            timestamptz NOT NULL,
    PRIMARY KEY (workload_uid, type, at, status, reason)
);

-- +goose Down

DROP TABLE kueue_workload_conditions;
DROP TABLE kueue_workloads;
