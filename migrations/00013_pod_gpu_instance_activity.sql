-- A pod that held a MIG instance is attributed to that instance, not only to
-- its GPU: pod_gpu_activity keys on (pod, GPU, instance) and carries the
-- instance's profile and its share of the GPU's compute, so two instances of
-- one GPU held by one pod are two rows, and a pod on a 1g instance reads as
-- holding 1/7 of an A100, not all of it. A whole GPU has instance '' and
-- share 1, as in gpu_minutes.

-- +goose Up

DROP VIEW pod_gpu_activity;
CREATE VIEW pod_gpu_activity AS
SELECT p.uid AS pod_uid, m.gpu_uuid, m.gpu_instance,
       max(m.gpu_instance_profile) AS gpu_instance_profile,
       max(m.compute_share)::double precision AS compute_share,
       max(m.node) AS node,
       count(*)::integer AS minutes,
       avg(m.gr_engine_active_avg)::double precision AS gr_engine_active_avg,
       avg(m.gpu_util_avg)::double precision AS gpu_util_avg,
       min(m.minute) AS first_minute, max(m.minute) AS last_minute
FROM pods p
JOIN gpu_minutes m ON m.pod_namespace = p.namespace AND m.pod_name = p.name
     AND m.minute >= date_trunc('minute', coalesce(p.started_at, p.scheduled_at, p.created_at))
     AND m.minute < coalesce(p.finished_at, 'infinity')
GROUP BY p.uid, m.gpu_uuid, m.gpu_instance;

-- +goose Down

DROP VIEW pod_gpu_activity;
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
