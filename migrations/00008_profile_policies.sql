-- The queue policies a profile sets besides weights, queue limits and the
-- gang timeout: how waiting jobs are ordered, the starvation bound, head-of-
-- line reservation and the preemption minimum run time. Without them a
-- profile read back from the store and published again would silently fall
-- back to arrival order, no reservation and no protection from preemption.
-- Defaults are what an absent field means in a profile document, so rows
-- stored before this keep their meaning.

-- +goose Up

ALTER TABLE profiles
    ADD COLUMN order_policy                  text    NOT NULL DEFAULT '',
    ADD COLUMN starvation_bound_seconds      integer NOT NULL DEFAULT 0 CHECK (starvation_bound_seconds >= 0),
    ADD COLUMN reservation                   boolean NOT NULL DEFAULT false,
    ADD COLUMN reservation_threshold_seconds integer NOT NULL DEFAULT 0 CHECK (reservation_threshold_seconds >= 0),
    ADD COLUMN preempt_min_run_time_seconds  integer NOT NULL DEFAULT 0 CHECK (preempt_min_run_time_seconds >= 0);

-- +goose Down

ALTER TABLE profiles
    DROP COLUMN preempt_min_run_time_seconds,
    DROP COLUMN reservation_threshold_seconds,
    DROP COLUMN reservation,
    DROP COLUMN starvation_bound_seconds,
    DROP COLUMN order_policy;
