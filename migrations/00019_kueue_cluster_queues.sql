-- Kueue ClusterQueues: cohort, fair-sharing weight, preemption policies and
-- each flavour-resource's quota, with the reservation and borrowing Kueue
-- last reported. Without them a ClusterQueue's use cannot be told apart
-- from what it borrows, and a replay of Kueue's admission has no quotas.
-- Quantities are thousandths of the resource's unit.

-- +goose Up

CREATE TABLE kueue_cluster_queues (
    name                  text PRIMARY KEY,
    cohort                text NOT NULL DEFAULT '',
    fair_weight           double precision NOT NULL DEFAULT 0 CHECK (fair_weight >= 0),
    queueing_strategy     text NOT NULL DEFAULT '',
    reclaim_within_cohort text NOT NULL DEFAULT '',
    borrow_within_cohort  text NOT NULL DEFAULT '',
    within_cluster_queue  text NOT NULL DEFAULT '',
    observed_at           timestamptz NOT NULL
);

CREATE TABLE kueue_cluster_queue_quotas (
    cluster_queue   text NOT NULL REFERENCES kueue_cluster_queues (name) ON DELETE CASCADE,
    flavor          text NOT NULL,
    resource        text NOT NULL,
    nominal         bigint NOT NULL CHECK (nominal >= 0),
    borrowing_limit bigint CHECK (borrowing_limit >= 0),
    lending_limit   bigint CHECK (lending_limit >= 0),
    reserved        bigint NOT NULL DEFAULT 0,
    borrowed        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (cluster_queue, flavor, resource)
);

-- +goose Down

DROP TABLE kueue_cluster_queue_quotas;
DROP TABLE kueue_cluster_queues;
