-- GPU demand that waits for Kueue's quota is counted apart from demand that
-- waits for capacity: a pod whose job's Workload holds no quota reservation
-- cannot be placed whatever is free, so the GPUs free meanwhile are idle by
-- policy. pending_gpus keeps only the demand that waits for capacity.

-- +goose Up

ALTER TABLE gpu_demand_minutes
    ADD COLUMN pending_quota_gpus real    NOT NULL DEFAULT 0 CHECK (pending_quota_gpus >= 0),
    ADD COLUMN pending_quota_pods integer NOT NULL DEFAULT 0 CHECK (pending_quota_pods >= 0);
CREATE INDEX kueue_workload_conditions_reserved_idx ON kueue_workload_conditions (workload_uid, at)
    WHERE type = 'QuotaReserved';

-- +goose Down

DROP INDEX kueue_workload_conditions_reserved_idx;
ALTER TABLE gpu_demand_minutes DROP COLUMN pending_quota_pods, DROP COLUMN pending_quota_gpus;
