-- MIG instances accounted one by one. dcgm-exporter prints a partitioned
-- GPU's instances under the GPU's own UUID, told apart by GPU_I_ID (and
-- GPU_I_PROFILE); until now they were folded into one row per GPU and minute.
--   gpu_samples, gpu_minutes  keep the instance, its profile and its share of
--                             the GPU's compute (a 1g instance of a seven-slice
--                             GPU holds 1/7; a whole GPU 1)
--   gpu_instances             the inventory's instances, beside gpus (whose
--                             one row per UUID stays the physical device)
--   gpu_device_minutes        the minutes the idle split counts: every
--                             instance, and a whole GPU only in minutes when
--                             none of its instances reported (dcgm-exporter
--                             prints the whole GPU too, which would otherwise
--                             count its compute twice)
-- The idle split weighs each minute by its compute share, so GPU-minute
-- columns of the rollups become double precision: a GPU with four busy and
-- three idle 1g instances is 4/7 busy and 3/7 allocated but idle.

-- +goose Up

ALTER TABLE gpu_samples
    ADD COLUMN gpu_instance         text NOT NULL DEFAULT '',
    ADD COLUMN gpu_instance_profile text NOT NULL DEFAULT '',
    ADD COLUMN compute_share        real NOT NULL DEFAULT 1 CHECK (compute_share > 0 AND compute_share <= 1);

ALTER TABLE gpu_minutes
    ADD COLUMN gpu_instance         text NOT NULL DEFAULT '',
    ADD COLUMN gpu_instance_profile text NOT NULL DEFAULT '',
    ADD COLUMN compute_share        real NOT NULL DEFAULT 1 CHECK (compute_share > 0 AND compute_share <= 1),
    DROP CONSTRAINT gpu_minutes_pkey,
    ADD PRIMARY KEY (gpu_uuid, minute, gpu_instance);

CREATE TABLE gpu_instances (
    gpu_uuid       text    NOT NULL REFERENCES gpus (uuid) ON DELETE CASCADE,
    gpu_instance   text    NOT NULL CHECK (gpu_instance <> ''),
    profile        text    NOT NULL DEFAULT '',
    compute_share  real    NOT NULL CHECK (compute_share > 0 AND compute_share <= 1),
    PRIMARY KEY (gpu_uuid, gpu_instance)
);

CREATE VIEW gpu_device_minutes AS
SELECT g.* FROM gpu_minutes g
WHERE g.gpu_instance <> ''
   OR NOT EXISTS (SELECT 1 FROM gpu_minutes i
                  WHERE i.gpu_uuid = g.gpu_uuid AND i.minute = g.minute AND i.gpu_instance <> '');

ALTER TABLE gpu_state_hours  ALTER COLUMN gpu_minutes TYPE double precision;
ALTER TABLE gpu_usage_hours  ALTER COLUMN gpu_minutes TYPE double precision;
ALTER TABLE gpu_usage_days   ALTER COLUMN gpu_minutes TYPE double precision;
ALTER TABLE gpu_node_hours   ALTER COLUMN gpu_minutes TYPE double precision;
ALTER TABLE gpu_node_days    ALTER COLUMN gpu_minutes TYPE double precision;
ALTER TABLE gpu_tenant_hours ALTER COLUMN gpu_minutes TYPE double precision;
ALTER TABLE gpu_tenant_days  ALTER COLUMN gpu_minutes TYPE double precision;
ALTER TABLE gpu_holder_hours
    ALTER COLUMN busy_minutes TYPE double precision,
    ALTER COLUMN idle_minutes TYPE double precision;
ALTER TABLE gpu_holder_days
    ALTER COLUMN busy_minutes TYPE double precision,
    ALTER COLUMN idle_minutes TYPE double precision;

-- +goose Down

ALTER TABLE gpu_holder_days
    ALTER COLUMN busy_minutes TYPE integer USING round(busy_minutes),
    ALTER COLUMN idle_minutes TYPE integer USING round(idle_minutes);
ALTER TABLE gpu_holder_hours
    ALTER COLUMN busy_minutes TYPE integer USING round(busy_minutes),
    ALTER COLUMN idle_minutes TYPE integer USING round(idle_minutes);
ALTER TABLE gpu_tenant_days  ALTER COLUMN gpu_minutes TYPE bigint USING round(gpu_minutes);
ALTER TABLE gpu_tenant_hours ALTER COLUMN gpu_minutes TYPE integer USING round(gpu_minutes);
ALTER TABLE gpu_node_days    ALTER COLUMN gpu_minutes TYPE integer USING round(gpu_minutes);
ALTER TABLE gpu_node_hours   ALTER COLUMN gpu_minutes TYPE integer USING round(gpu_minutes);
ALTER TABLE gpu_usage_days   ALTER COLUMN gpu_minutes TYPE bigint USING round(gpu_minutes);
ALTER TABLE gpu_usage_hours  ALTER COLUMN gpu_minutes TYPE integer USING round(gpu_minutes);
ALTER TABLE gpu_state_hours  ALTER COLUMN gpu_minutes TYPE integer USING round(gpu_minutes);
DROP VIEW gpu_device_minutes;
DROP TABLE gpu_instances;
-- Instances fold back into one row per GPU and minute: the whole GPU's row
-- where there is one, else the instance that sorts first.
DELETE FROM gpu_minutes g WHERE g.gpu_instance <> '' AND EXISTS (
    SELECT 1 FROM gpu_minutes o WHERE o.gpu_uuid = g.gpu_uuid AND o.minute = g.minute
       AND (o.gpu_instance = '' OR o.gpu_instance < g.gpu_instance));
ALTER TABLE gpu_minutes
    DROP CONSTRAINT gpu_minutes_pkey,
    ADD PRIMARY KEY (gpu_uuid, minute),
    DROP COLUMN compute_share,
    DROP COLUMN gpu_instance_profile,
    DROP COLUMN gpu_instance;
ALTER TABLE gpu_samples
    DROP COLUMN compute_share,
    DROP COLUMN gpu_instance_profile,
    DROP COLUMN gpu_instance;
