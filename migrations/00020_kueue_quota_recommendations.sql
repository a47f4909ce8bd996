-- ClusterQueue quota changes the tuner proposes, with the replayed evidence
-- for them and the patch an operator applies. Nothing applies them: a row
-- is a proposal, shown until a newer one replaces it.

-- +goose Up

CREATE TABLE kueue_quota_recommendations (
    id                       bigserial PRIMARY KEY,
    created_at               timestamptz NOT NULL,
    changes                  jsonb NOT NULL,
    quota_wait_before_s      double precision NOT NULL CHECK (quota_wait_before_s >= 0),
    quota_wait_after_s       double precision NOT NULL CHECK (quota_wait_after_s >= 0),
    mean_wait_before_s       double precision NOT NULL CHECK (mean_wait_before_s >= 0),
    mean_wait_after_s        double precision NOT NULL CHECK (mean_wait_after_s >= 0),
    jobs                     integer NOT NULL CHECK (jobs >= 0),
    patch                    text NOT NULL
);

-- +goose Down

DROP TABLE kueue_quota_recommendations;
