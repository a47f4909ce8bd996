-- A job outlives the eviction of its pods: a controller (Job, JobSet, a
-- Kueue-managed workload) makes new pods for it, and the job ends only when
-- a run of them ends, or when the object that declares it goes.
--   pods.evicted     the pod was deleted by an eviction (it carried the
--                    DisruptionTarget condition, as the scheduler's
--                    preemption sets it): its job is not over, a new pod
--                    takes its place
--   jobs.deleted_at  when the gang's group object (PodGroup) was deleted:
--                    no new member can join it after that
--   job_jct          a job none of whose members was ever bound never ran:
--                    its queue, run and completion times are NULL, where
--                    the completion time used to be its deletion minus its
--                    creation, so JCT figures count jobs that ran

-- +goose Up

ALTER TABLE pods ADD COLUMN evicted boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN deleted_at timestamptz;

CREATE OR REPLACE VIEW job_jct AS
SELECT uid, namespace, name, kind, queue, priority, min_member, gpus_per_member, gpu_milli_per_member,
       created_at, admitted_at, finished_at, phase,
       extract(epoch FROM coalesce(admitted_at, first_scheduled_at) - created_at)::double precision AS queue_seconds,
       extract(epoch FROM finished_at - coalesce(admitted_at, first_scheduled_at))::double precision AS run_seconds,
       CASE WHEN coalesce(admitted_at, first_scheduled_at) IS NOT NULL
           THEN extract(epoch FROM finished_at - created_at)::double precision END AS jct_seconds
FROM jobs;

-- +goose Down

CREATE OR REPLACE VIEW job_jct AS
SELECT uid, namespace, name, kind, queue, priority, min_member, gpus_per_member, gpu_milli_per_member,
       created_at, admitted_at, finished_at, phase,
       extract(epoch FROM coalesce(admitted_at, first_scheduled_at) - created_at)::double precision AS queue_seconds,
       extract(epoch FROM finished_at - coalesce(admitted_at, first_scheduled_at))::double precision AS run_seconds,
       extract(epoch FROM finished_at - created_at)::double precision AS jct_seconds
FROM jobs;

ALTER TABLE jobs DROP COLUMN deleted_at;
ALTER TABLE pods DROP COLUMN evicted;
