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
// profile, which telemetry does not carry, are kept.
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
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record %d GPUs seen in telemetry: %w", len(gpus), err)
	}
	return nil
}
