-- Kueue ClusterQueues' spec.flavorFungibility and the spec order of their
-- quotas: both decide which flavour Kueue's flavour assigner gives a
-- workload (the order is the order flavours are tried), so a replay of
-- stored queues without them assigns under Kueue's defaults and in flavour
-- name order. '' is unset, Kueue's default.

-- +goose Up

ALTER TABLE kueue_cluster_queues
    ADD COLUMN when_can_borrow  text NOT NULL DEFAULT '',
    ADD COLUMN when_can_preempt text NOT NULL DEFAULT '',
    ADD COLUMN fungibility_preference text NOT NULL DEFAULT '';

ALTER TABLE kueue_cluster_queue_quotas
    ADD COLUMN position integer NOT NULL DEFAULT 0 CHECK (position >= 0);

-- +goose Down

ALTER TABLE kueue_cluster_queue_quotas DROP COLUMN position;
ALTER TABLE kueue_cluster_queues
    DROP COLUMN fungibility_preference,
    DROP COLUMN when_can_preempt,
    DROP COLUMN when_can_borrow;
