package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/schedloop/schedloop"
)

// A telemetry-only collector (no cluster to watch) learns its nodes from the
// exporters' Hostname label: the node row is created bare and the cluster
// watcher, when there is one, fills it in.
const ensureNodeSQL = `INSERT INTO nodes (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`

// RecordGPUs stores devices seen in telemetry, creating bare rows for nodes
// not stored yet. Model and position are updated; the NVLink domain and MIG
// profile, which telemetry does not carry, are kept. A MIG instance (Instance
// set) is stored in gpu_instances under its GPU, whose row it creates if the
// GPU itself was not listed.
func (s *Store) RecordGPUs(ctx context.Context, gpus []schedloop.GPU) error {
	if len(gpus) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	seen := map[string]bool{}
	for _, g := range gpus {
		if !seen[g.Node] {
			seen[g.Node] = true
			b.Queue(ensureNodeSQL, g.Node)
		}
	}
	for _, g := range gpus {
		b.Queue(`
			INSERT INTO gpus (uuid, node, gpu_index, model) VALUES ($1, $2, $3, $4)
			ON CONFLICT (uuid) DO UPDATE SET node = EXCLUDED.node, gpu_index = EXCLUDED.gpu_index,
			    model = CASE WHEN EXCLUDED.model <> '' THEN EXCLUDED.model ELSE gpus.model END`,
			g.UUID, g.Node, g.Index, g.Model)
		if err := queueInstance(b, g); err != nil {
			return fmt.Errorf("record GPUs seen in telemetry: %w", err)
		}
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record %d GPUs seen in telemetry: %w", len(gpus), err)
	}
	return nil
}

// An instance telemetry names by its MIG UUID may already be stored,
// without a GPU instance id, from the ResourceSlice that published it:
// that row takes the id (or, when telemetry stored the id first, gives way
// to it), so one instance is one row.
const (
	claimDRAInstanceSQL = `
UPDATE gpu_instances s SET gpu_instance = $2
WHERE s.mig_uuid = $3 AND s.gpu_uuid = $1 AND s.gpu_instance IS NULL
  AND NOT EXISTS (SELECT 1 FROM gpu_instances t WHERE t.gpu_uuid = $1 AND t.gpu_instance = $2)`
	upsertInstanceSQL = `
INSERT INTO gpu_instances (gpu_uuid, gpu_instance, profile, compute_share, mig_uuid) VALUES ($1, $2, $3, $4, nullif($5, ''))
ON CONFLICT (gpu_uuid, gpu_instance) DO UPDATE SET profile = EXCLUDED.profile, compute_share = EXCLUDED.compute_share,
    mig_uuid = coalesce(EXCLUDED.mig_uuid, gpu_instances.mig_uuid), gone_at = NULL`
)

// queueInstance queues the gpu_instances row of g when g is a MIG instance.
func queueInstance(b *pgx.Batch, g schedloop.GPU) error {
	if g.Instance == "" {
		return nil
	}
	share, err := schedloop.MIGComputeShare(g.Model, g.MIGProfile)
	if err != nil {
		return fmt.Errorf("GPU %s instance %s: %w", g.UUID, g.Instance, err)
	}
	if g.MIGProfile == "" {
		return fmt.Errorf("GPU %s instance %s: no MIG profile", g.UUID, g.Instance)
	}
	if g.MIGUUID != "" {
		b.Queue(claimDRAInstanceSQL, g.UUID, g.Instance, g.MIGUUID)
		b.Queue(`DELETE FROM gpu_instances WHERE mig_uuid = $1 AND gpu_instance IS NULL`, g.MIGUUID)
		// A MIG UUID names one instance: an id it was stored under before
		// (the instance destroyed and its id reused) no longer holds it.
		b.Queue(`UPDATE gpu_instances SET mig_uuid = NULL
			WHERE mig_uuid = $3 AND NOT (gpu_uuid = $1 AND gpu_instance = $2)`, g.UUID, g.Instance, g.MIGUUID)
	}
	b.Queue(upsertInstanceSQL, g.UUID, g.Instance, g.MIGProfile, share, g.MIGUUID)
	return nil
}
