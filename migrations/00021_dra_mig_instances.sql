-- MIG instances NVIDIA's DRA driver publishes become inventory rows under
-- their parent GPU. The driver names an instance by its own MIG- UUID and
-- profile but publishes no GPU instance id, the key telemetry names it by:
--   gpu_instances.gpu_instance  NULL while only the ResourceSlice knows the
--                               instance; set once telemetry names the same
--                               MIG UUID with its GPU_I_ID, so the row is
--                               matched, not duplicated
--   gpu_instances.mig_uuid      the instance's MIG- UUID, unique where known
--   gpu_instances.first_seen,   when a slice first published it and when no
--   gpu_instances.gone_at       slice publishes it any more (kept, not deleted)
--   gpu_device_minutes          counts, in each minute its GPU reported, an
--                               instance known only from its slice as a free
--                               device of its compute share, and no longer
--                               the whole GPU's own reading beside it, so an
--                               instance nothing uses yet is idle capacity
--                               rather than absent; only within the compute
--                               that instances telemetry reports that minute
--                               leave, since telemetry naming an instance by
--                               GPU instance id alone cannot be matched to it

-- +goose Up

ALTER TABLE gpu_instances
    DROP CONSTRAINT gpu_instances_pkey,
    ALTER COLUMN gpu_instance DROP NOT NULL,
    ADD CONSTRAINT gpu_instances_gpu_uuid_gpu_instance_key UNIQUE (gpu_uuid, gpu_instance),
    ADD COLUMN mig_uuid   text UNIQUE CHECK (mig_uuid <> ''),
    ADD COLUMN first_seen timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN gone_at    timestamptz,
    ADD CONSTRAINT gpu_instances_keyed CHECK (gpu_instance IS NOT NULL OR mig_uuid IS NOT NULL);

CREATE OR REPLACE VIEW gpu_device_minutes AS
SELECT g.* FROM gpu_minutes g
WHERE g.gpu_instance <> ''
   OR NOT EXISTS (SELECT 1 FROM gpu_minutes i
                  WHERE i.gpu_uuid = g.gpu_uuid AND i.minute = g.minute AND i.gpu_instance <> '')
  AND NOT EXISTS (SELECT 1 FROM gpu_instances s
                  WHERE s.gpu_uuid = g.gpu_uuid AND s.gpu_instance IS NULL
                    AND date_trunc('minute', s.first_seen) <= g.minute AND coalesce(s.gone_at, 'infinity') > g.minute)
UNION ALL
SELECT f.minute, f.gpu_uuid, f.node, '', '', 0, 0, 0, 0, 0, 0, f.mig_uuid, f.profile, f.compute_share
FROM (SELECT m.minute, s.gpu_uuid, m.node, s.mig_uuid, s.profile, s.compute_share, m.reported,
             sum(s.compute_share) OVER (PARTITION BY s.gpu_uuid, m.minute ORDER BY s.mig_uuid) AS filled
      FROM gpu_instances s
      JOIN LATERAL (SELECT r.minute, min(r.node) AS node,
                           coalesce(sum(r.compute_share) FILTER (WHERE r.gpu_instance <> ''), 0) AS reported
                    FROM gpu_minutes r
                    WHERE r.gpu_uuid = s.gpu_uuid AND r.minute >= date_trunc('minute', s.first_seen)
                      AND r.minute < coalesce(s.gone_at, 'infinity')
                    GROUP BY r.minute) m ON true
      WHERE s.gpu_instance IS NULL) f
-- Telemetry that names instances by GPU instance id alone (the host
-- engine's, or dcgm-exporter's for an instance no claim holds) cannot be
-- matched to a slice's row by MIG UUID: a slice-only instance fills only
-- the compute the minute's reported instances leave, so one instance is
-- never counted twice and a GPU never counts for more than itself.
WHERE f.filled <= 1 - f.reported + 1e-4;

-- +goose Down

CREATE OR REPLACE VIEW gpu_device_minutes AS
SELECT g.* FROM gpu_minutes g
WHERE g.gpu_instance <> ''
   OR NOT EXISTS (SELECT 1 FROM gpu_minutes i
                  WHERE i.gpu_uuid = g.gpu_uuid AND i.minute = g.minute AND i.gpu_instance <> '');
DELETE FROM gpu_instances WHERE gpu_instance IS NULL;
ALTER TABLE gpu_instances
    DROP CONSTRAINT gpu_instances_keyed,
    DROP COLUMN gone_at,
    DROP COLUMN first_seen,
    DROP COLUMN mig_uuid,
    DROP CONSTRAINT gpu_instances_gpu_uuid_gpu_instance_key,
    ALTER COLUMN gpu_instance SET NOT NULL,
    ADD PRIMARY KEY (gpu_uuid, gpu_instance);
