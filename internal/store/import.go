package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/schedloop/schedloop"
)

// importChunk is how many jobs one COPY of an import sends, so that a
// progress report comes every few seconds of a large trace.
const importChunk = 10_000

// ImportJobs bulk-loads jobs (for example a public trace converted by the
// tuner) with COPY through a staging table, so a large trace loads in one
// round trip per call and a second import of the same jobs adds nothing:
// rows whose UID is already stored are left as they are. It returns how
// many jobs were new.
func (s *Store) ImportJobs(ctx context.Context, jobs []schedloop.Job) (int64, error) {
	return s.ImportTrace(ctx, nil, jobs, nil)
}

// ImportTrace stores an inventory and a workload in one transaction: either
// every node and job is stored or, when any row is refused, nothing is, so
// a bad row deep in a trace leaves no half-imported history behind. Jobs go
// through ImportJobs's staging table; progress, when set, is told how many
// jobs have been sent so far.
func (s *Store) ImportTrace(ctx context.Context, nodes []schedloop.Node, jobs []schedloop.Job, progress func(sent int)) (int64, error) {
	var added int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if len(nodes) > 0 {
			if err := upsertNodes(ctx, tx, nodes); err != nil {
				return err
			}
		}
		if len(jobs) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE jobs_import (LIKE jobs INCLUDING DEFAULTS) ON COMMIT DROP`); err != nil {
			return fmt.Errorf("create staging table: %w", err)
		}
		for i := 0; i < len(jobs); i += importChunk {
			if err := copyImportJobs(ctx, tx, jobs[i:min(i+importChunk, len(jobs))], i); err != nil {
				return err
			}
			if progress != nil {
				progress(min(i+importChunk, len(jobs)))
			}
		}
		tag, err := tx.Exec(ctx, `INSERT INTO jobs SELECT * FROM jobs_import ON CONFLICT (uid) DO NOTHING`)
		if err != nil {
			return fmt.Errorf("insert copied jobs: %w", err)
		}
		added = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("import %d nodes and %d jobs (nothing stored): %w", len(nodes), len(jobs), err)
	}
	return added, nil
}

// copyImportJobs sends jobs, the first of which is job number first of the
// import, into the staging table.
func copyImportJobs(ctx context.Context, tx pgx.Tx, jobs []schedloop.Job, first int) error {
	cols := []string{"uid", "namespace", "name", "kind", "queue", "priority", "min_member", "gpus_per_member",
		"gpu_milli_per_member", "created_at", "first_scheduled_at", "admitted_at", "started_at", "finished_at", "phase",
		"cpu_milli_per_member", "memory_mib_per_member", "gpu_models"}
	src := pgx.CopyFromSlice(len(jobs), func(i int) ([]any, error) {
		j := jobs[i]
		if j.UID == "" || j.Created.IsZero() {
			return nil, fmt.Errorf("job %d (%s/%s): uid and created time are required", first+i, j.Namespace, j.Name)
		}
		kind := j.Kind
		if kind == "" {
			kind = schedloop.JobKindPod
		}
		return []any{j.UID, j.Namespace, j.Name, string(kind), j.Queue, j.Priority, gangMembers(j.MinMember),
			j.GPUsPerMember, j.GPUMilliPerMember, j.Created, nullTime(j.FirstScheduled), nullTime(j.Admitted),
			nullTime(j.Started), nullTime(j.Finished), phaseOrPending(j.Phase), j.CPUMilliPerMember,
			j.MemoryMiBPerMember, textArray(j.GPUModels)}, nil
	})
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"jobs_import"}, cols, src); err != nil {
		return fmt.Errorf("copy jobs %d..%d: %w", first, first+len(jobs)-1, err)
	}
	return nil
}
