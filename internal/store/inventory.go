package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/schedloop/schedloop"
)

const upsertNodeSQL = `
INSERT INTO nodes (name, labels, topology, gpu_model, gpu_count, cpu_milli, memory_mib, ready, first_seen, last_seen)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, coalesce($9, now()), coalesce($10, now()))
ON CONFLICT (name) DO UPDATE SET
    labels = EXCLUDED.labels, topology = EXCLUDED.topology, gpu_model = EXCLUDED.gpu_model,
    gpu_count = EXCLUDED.gpu_count, cpu_milli = EXCLUDED.cpu_milli, memory_mib = EXCLUDED.memory_mib,
    ready = EXCLUDED.ready,
    first_seen = least(nodes.first_seen, EXCLUDED.first_seen),
    last_seen = greatest(nodes.last_seen, EXCLUDED.last_seen)`

// UpsertNodes records nodes as last observed; first_seen keeps the earliest
// observation across upserts.
func (s *Store) UpsertNodes(ctx context.Context, nodes []schedloop.Node) error {
	return upsertNodes(ctx, s.pool, nodes)
}

// batchSender is a pool or a transaction.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

func upsertNodes(ctx context.Context, db batchSender, nodes []schedloop.Node) error {
	b := &pgx.Batch{}
	for _, n := range nodes {
		b.Queue(upsertNodeSQL, n.Name, orEmpty(n.Labels), orEmpty(n.Topology), n.GPUModel, n.GPUCount,
			n.CPUMilli, n.MemoryMiB, n.Ready, nullTime(n.FirstSeen), nullTime(n.LastSeen))
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("upsert %d nodes: %w", len(nodes), err)
	}
	return nil
}

// ListNodes returns the inventory ordered by name.
func (s *Store) ListNodes(ctx context.Context) ([]schedloop.Node, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT name, labels, topology, gpu_model, gpu_count, cpu_milli, memory_mib, ready, first_seen, last_seen
		FROM nodes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	nodes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.Node, error) {
		var n schedloop.Node
		err := r.Scan(&n.Name, &n.Labels, &n.Topology, &n.GPUModel, &n.GPUCount, &n.CPUMilli, &n.MemoryMiB,
			&n.Ready, &n.FirstSeen, &n.LastSeen)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return nodes, nil
}

const upsertGPUSQL = `
INSERT INTO gpus (uuid, node, gpu_index, model, nvlink_domain, mig_profile)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (uuid) DO UPDATE SET
    node = EXCLUDED.node, gpu_index = EXCLUDED.gpu_index, model = EXCLUDED.model,
    nvlink_domain = EXCLUDED.nvlink_domain, mig_profile = EXCLUDED.mig_profile`

// UpsertGPUs records devices; their nodes must already be stored.
func (s *Store) UpsertGPUs(ctx context.Context, gpus []schedloop.GPU) error {
	b := &pgx.Batch{}
	for _, g := range gpus {
		b.Queue(upsertGPUSQL, g.UUID, g.Node, g.Index, g.Model, g.NVLinkDomain, g.MIGProfile)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("upsert %d GPUs: %w", len(gpus), err)
	}
	return nil
}

// ListGPUs returns the GPUs of one node, or of every node when node is "".
func (s *Store) ListGPUs(ctx context.Context, node string) ([]schedloop.GPU, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT uuid, node, gpu_index, model, nvlink_domain, mig_profile FROM gpus
		WHERE $1 = '' OR node = $1 ORDER BY node, gpu_index, uuid`, node)
	if err != nil {
		return nil, fmt.Errorf("list GPUs: %w", err)
	}
	gpus, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.GPU, error) {
		var g schedloop.GPU
		err := r.Scan(&g.UUID, &g.Node, &g.Index, &g.Model, &g.NVLinkDomain, &g.MIGProfile)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("list GPUs: %w", err)
	}
	return gpus, nil
}
