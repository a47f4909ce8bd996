-- +goose Up
-- "reserved for <namespace>/<job>" (a node held for a job ahead under
-- reservation and backfill) has its own wait category. Attempts stored
-- while it was filed under other move to it where its reason covers at
-- least as many nodes as every other reason of the attempt, as the parser
-- now files them (a category covers as many nodes as its largest reason;
-- the category other had covered the most, so no other category covers
-- more than the reserved reason does).
UPDATE scheduling_attempts a
SET category = 'reserved'
FROM (
    SELECT sa.id, max(r.value::int) FILTER (WHERE r.key ~ '^reserved for [^/\s]+/\S+$') AS held,
           coalesce(max(r.value::int) FILTER (WHERE r.key !~ '^reserved for [^/\s]+/\S+$'), -1) AS rest
    FROM scheduling_attempts sa, jsonb_each_text(sa.reasons) r
    WHERE sa.category = 'other'
    GROUP BY sa.id
) m
WHERE a.id = m.id AND m.held IS NOT NULL AND m.held >= m.rest;

-- +goose Down
UPDATE scheduling_attempts SET category = 'other' WHERE category = 'reserved';
