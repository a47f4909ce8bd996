-- +goose Up

-- A pod's creation time is refined from when the watcher saw it, which can
-- be a little after the scheduler's first attempt (the scheduler sees the
-- pod first, and its Event carries a microsecond time). Such an attempt
-- used to fall before created_at and be dropped, so the wait read as not
-- yet attempted until the next attempt. It now counts from created_at, and
-- the not-yet-attempted mark sorts first at that instant so it spans nothing.
CREATE OR REPLACE VIEW pod_wait_intervals AS
WITH marks AS (
    SELECT a.pod_uid, a.at, a.category, a.reasons, a.message, a.total_nodes
    FROM scheduling_attempts a
    WHERE a.result <> 'scheduled'
), bounded AS (
    SELECT p.uid AS pod_uid, p.created_at AS at, 0 AS mark_order, 'not_attempted'::text AS category,
           '{}'::jsonb AS reasons, ''::text AS message, 0 AS total_nodes
    FROM pods p
    UNION ALL
    SELECT m.pod_uid, greatest(m.at, p.created_at), 1, m.category, m.reasons, m.message, m.total_nodes
    FROM marks m JOIN pods p ON p.uid = m.pod_uid
    WHERE p.scheduled_at IS NULL OR m.at < p.scheduled_at
)
SELECT b.pod_uid, b.at AS started_at,
       coalesce(lead(b.at) OVER w, p.scheduled_at, p.finished_at, now()) AS ended_at,
       b.category, b.reasons, b.message, b.total_nodes
FROM bounded b JOIN pods p ON p.uid = b.pod_uid
WINDOW w AS (PARTITION BY b.pod_uid ORDER BY b.at, b.mark_order, b.category);

-- +goose Down

CREATE OR REPLACE VIEW pod_wait_intervals AS
WITH marks AS (
    SELECT a.pod_uid, a.at, a.category, a.reasons, a.message, a.total_nodes
    FROM scheduling_attempts a
    WHERE a.result <> 'scheduled'
), bounded AS (
    SELECT p.uid AS pod_uid, p.created_at AS at, 'not_attempted'::text AS category,
           '{}'::jsonb AS reasons, ''::text AS message, 0 AS total_nodes
    FROM pods p
    UNION ALL
    SELECT m.* FROM marks m JOIN pods p ON p.uid = m.pod_uid
    WHERE m.at >= p.created_at AND (p.scheduled_at IS NULL OR m.at < p.scheduled_at)
)
SELECT b.pod_uid, b.at AS started_at,
       coalesce(lead(b.at) OVER w, p.scheduled_at, p.finished_at, now()) AS ended_at,
       b.category, b.reasons, b.message, b.total_nodes
FROM bounded b JOIN pods p ON p.uid = b.pod_uid
WINDOW w AS (PARTITION BY b.pod_uid ORDER BY b.at, b.category);
