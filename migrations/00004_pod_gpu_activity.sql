-- Which GPUs each pod ran on and how busy they were while it held them,
-- read from the per-minute rollup: a minute belongs to a pod when the pod
-- was the GPU's holder in that minute and the minute lies in the pod's run.

-- +goose Up

CREATE VIEW pod_gpu_activity AS
SELECT p.uid AS pod_uid, m.gpu_uuid, max(m.node) AS node,
       count(*)::integer AS minutes,
       avg(m.gr_engine_active_avg)::double precision AS gr_engine_active_avg,
       avg(m.gpu_util_avg)::double precision AS gpu_util_avg,
       min(m.minute) AS first_minute, max(m.minute) AS last_minute
FROM pods p
JOIN gpu_minutes m ON m.pod_namespace = p.namespace AND m.pod_name = p.name
     AND m.minute >= date_trunc('minute', coalesce(p.started_at, p.scheduled_at, p.created_at))
     AND m.minute < coalesce(p.finished_at, 'infinity')
GROUP BY p.uid, m.gpu_uuid;

-- +goose Down

DROP VIEW pod_gpu_activity;
