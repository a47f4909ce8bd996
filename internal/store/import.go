package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/schedloop/schedloop"
)

// ImportJobs bulk-loads jobs (for example a public trace converted by the
// tuner) with COPY through a staging table, so a large trace loads in one
// round trip per call and a second import of the same jobs adds nothing:
// rows whose UID is already stored are left as they are. It returns how
// many jobs were new.
func (s *Store) ImportJobs(ctx context.Context, jobs []schedloop.Job) (int64, error) {
	var added int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE jobs_import (LIKE jobs INCLUDING DEFAULTS) ON COMMIT DROP`); err != nil {
			return fmt.Errorf("create staging table: %w", err)
		}
		cols := []string{"uid", "namespace", "name", "kind", "queue", "priority", "min_member", "gpus_per_member",
			"gpu_milli_per_member", "created_at", "first_scheduled_at", "admitted_at", "started_at", "finished_at", "phase",
			"cpu_milli_per_member", "memory_mib_per_member", "gpu_models"}
		src := pgx.CopyFromSlice(len(jobs), func(i int) ([]any, error) {
			j := jobs[i]
			if j.UID == "" || j.Created.IsZero() {
				return nil, fmt.Errorf("job %d (%s/%s): uid and created time are required", i, j.Namespace, j.Name)
			}
			kind := j.Kind
			if kind == "" {
				kind = schedloop.JobKindPod
			}
			return []any{j.UID, j.Namespace, j.Name, string(kind), j.Queue, j.Priority, max(j.MinMember, 1),
				j.GPUsPerMember, j.GPUMilliPerMember, j.Created, nullTime(j.FirstScheduled), nullTime(j.Admitted),
				nullTime(j.Started), nullTime(j.Finished), phaseOrPending(j.Phase), j.CPUMilliPerMember,
				j.MemoryMiBPerMember, textArray(j.GPUModels)}, nil
		})
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"jobs_import"}, cols, src); err != nil {
			return fmt.Errorf("copy jobs: %w", err)
		}
		tag, err := tx.Exec(ctx, `INSERT INTO jobs SELECT * FROM jobs_import ON CONFLICT (uid) DO NOTHING`)
		if err != nil {
			return fmt.Errorf("insert copied jobs: %w", err)
		}
		added = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("import %d jobs: %w", len(jobs), err)
	}
	return added, nil
}
