-- Spooled sample batches already stored. The collector writes a batch's id
-- in the same transaction as its COPY, so a batch whose spool file outlived
-- a crash (stored, file not yet deleted) is recognised and not stored twice.

-- +goose Up

CREATE TABLE ingested_batches (
    batch_id   text        PRIMARY KEY,
    samples    integer     NOT NULL CHECK (samples >= 0),
    stored_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down

DROP TABLE ingested_batches;
