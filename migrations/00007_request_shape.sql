-- What each member of a job asks for besides GPUs: CPU, memory and the GPU
-- models it may run on. Replays of stored history need the whole request
-- shape (fragmentation depends on CPU; model constraints decide where a pod
-- may go). The collector fills pods from their requests and derives a job's
-- shape from its members. Defaults keep rows stored before this valid: no
-- CPU or memory asked, any model.

-- +goose Up

ALTER TABLE jobs
    ADD COLUMN cpu_milli_per_member  bigint NOT NULL DEFAULT 0 CHECK (cpu_milli_per_member >= 0),
    ADD COLUMN memory_mib_per_member bigint NOT NULL DEFAULT 0 CHECK (memory_mib_per_member >= 0),
    ADD COLUMN gpu_models            text[] NOT NULL DEFAULT '{}';

ALTER TABLE pods
    ADD COLUMN cpu_milli  bigint NOT NULL DEFAULT 0 CHECK (cpu_milli >= 0),
    ADD COLUMN memory_mib bigint NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),
    ADD COLUMN gpu_models text[] NOT NULL DEFAULT '{}';

-- +goose Down

ALTER TABLE pods DROP COLUMN gpu_models, DROP COLUMN memory_mib, DROP COLUMN cpu_milli;
ALTER TABLE jobs DROP COLUMN gpu_models, DROP COLUMN memory_mib_per_member, DROP COLUMN cpu_milli_per_member;
