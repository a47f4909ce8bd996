-- Wait estimates as they were made: each pending job's expected start at
-- one instant, kept so the estimates' accuracy can be measured against the
-- starts that followed (ETAAccuracy). Rows older than the retention the
-- collector states are deleted as new ones are written.

-- +goose Up

CREATE TABLE eta_estimates (
    job_uid               text        NOT NULL,
    made_at               timestamptz NOT NULL,
    state                 text        NOT NULL,
    p10                   timestamptz,
    p50                   timestamptz,
    p90                   timestamptz,
    predicted_run_seconds double precision NOT NULL DEFAULT 0,
    nodes                 text[]      NOT NULL DEFAULT '{}',
    PRIMARY KEY (job_uid, made_at)
);
CREATE INDEX eta_estimates_made_at ON eta_estimates (made_at);

-- +goose Down

DROP TABLE eta_estimates;
