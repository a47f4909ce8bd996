-- Dynamic Resource Allocation as the collector saw it: every device the
-- ResourceSlices published (whole GPUs, MIG instances, and devices of any
-- driver or attribute schedloop does not read, kept and counted rather than
-- dropped), and every ResourceClaim with its lifecycle.

-- +goose Up

-- One row per device a slice published, keyed as an allocation result
-- names it. gone_at is set while no slice publishes it; unknown lists the
-- attributes and capacities schedloop does not read; problems names each
-- attribute that was missing or of the wrong kind.
CREATE TABLE dra_devices (
    driver        text NOT NULL,
    pool          text NOT NULL,
    device        text NOT NULL,
    node          text NOT NULL DEFAULT '',
    type          text NOT NULL DEFAULT '',
    uuid          text NOT NULL DEFAULT '',
    parent_uuid   text NOT NULL DEFAULT '',
    product       text NOT NULL DEFAULT '',
    profile       text NOT NULL DEFAULT '',
    clique        text NOT NULL DEFAULT '',
    memory_bytes  bigint NOT NULL DEFAULT 0,
    unknown       text[] NOT NULL DEFAULT '{}',
    problems      text[] NOT NULL DEFAULT '{}',
    first_seen    timestamptz NOT NULL,
    last_seen     timestamptz NOT NULL,
    gone_at       timestamptz,
    PRIMARY KEY (driver, pool, device)
);

-- One row per ResourceClaim. state is its latest: pending (not allocated),
-- allocated, reserved (allocated and reserved for a consumer), deallocated
-- (its allocation was released) or deleted. Each time is the first the
-- collector saw the claim in that state; devices are those of its last
-- allocation (driver/pool/device), device_uuids their UUIDs as the slices
-- published them, and lost_devices those that left their slices while the
-- claim held them.
CREATE TABLE resource_claims (
    uid             text PRIMARY KEY,
    namespace       text NOT NULL,
    name            text NOT NULL,
    state           text NOT NULL CHECK (state IN ('pending', 'allocated', 'reserved', 'deallocated', 'deleted')),
    node            text NOT NULL DEFAULT '',
    reserved_for    text[] NOT NULL DEFAULT '{}',
    devices         text[] NOT NULL DEFAULT '{}',
    device_uuids    text[] NOT NULL DEFAULT '{}',
    lost_devices    text[] NOT NULL DEFAULT '{}',
    gpus            integer NOT NULL DEFAULT 0,
    mig_instances   integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    allocated_at    timestamptz,
    reserved_at     timestamptz,
    deallocated_at  timestamptz,
    deleted_at      timestamptz
);
CREATE INDEX resource_claims_name_idx ON resource_claims (namespace, name);

-- +goose Down

DROP TABLE resource_claims;
DROP TABLE dra_devices;
