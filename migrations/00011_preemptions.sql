-- Evictions by schedloop's preemption, one row per evicted pod, with the
-- cause the scheduler recorded on the victim ("Preempted" Event): the
-- preemptor pod and its priority, the node it was nominated to, the
-- victim's job (evicted whole) and the GPU-hours that job lost.

-- +goose Up

CREATE TABLE preemptions (
    victim_uid          text PRIMARY KEY,
    namespace           text NOT NULL,
    victim_pod          text NOT NULL,
    victim_job          text NOT NULL,
    preemptor           text NOT NULL,
    preemptor_priority  integer NOT NULL,
    node                text NOT NULL,
    gpu_hours           double precision NOT NULL CHECK (gpu_hours >= 0),
    at                  timestamptz NOT NULL
);
CREATE INDEX preemptions_preemptor_idx ON preemptions (preemptor, at);
CREATE INDEX preemptions_victim_job_idx ON preemptions (victim_job, at);

-- +goose Down

DROP TABLE preemptions;
