-- Every sample batch now records its id (not only spooled ones), so the
-- table gains a row per COPY and each COPY forgets the ids older than the
-- collector's memory in the same transaction: an index on stored_at keeps
-- that a short range scan instead of a pass over every id.

-- +goose Up

CREATE INDEX ingested_batches_stored_at ON ingested_batches (stored_at);

-- +goose Down

DROP INDEX ingested_batches_stored_at;
