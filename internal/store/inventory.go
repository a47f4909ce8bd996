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

// UpsertGPUs records devices; their nodes must already be stored. A MIG
// instance (Instance set) goes to gpu_instances; its GPU must be listed
// before it or be stored already.
func (s *Store) UpsertGPUs(ctx context.Context, gpus []schedloop.GPU) error {
	b := &pgx.Batch{}
	for _, g := range gpus {
		if g.Instance != "" {
			if err := queueInstance(b, g); err != nil {
				return fmt.Errorf("upsert GPUs: %w", err)
			}
			continue
		}
		b.Queue(upsertGPUSQL, g.UUID, g.Node, g.Index, g.Model, g.NVLinkDomain, g.MIGProfile)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("upsert %d GPUs: %w", len(gpus), err)
	}
	return nil
}

// ListGPUs returns the GPUs of one node, or of every node when node is "",
// each followed by its MIG instances (Instance or MIGUUID set) in instance
// order, those known only by MIG UUID last. Instances no slice publishes
// any more are left out.
func (s *Store) ListGPUs(ctx context.Context, node string) ([]schedloop.GPU, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT g.uuid, g.node, g.gpu_index, g.model, g.nvlink_domain, g.mig_profile,
		       i.gpu_uuid IS NOT NULL, coalesce(i.gpu_instance, ''), coalesce(i.profile, ''), coalesce(i.mig_uuid, '')
		FROM gpus g LEFT JOIN gpu_instances i ON i.gpu_uuid = g.uuid AND i.gone_at IS NULL
		WHERE $1 = '' OR g.node = $1
		ORDER BY g.node, g.gpu_index, g.uuid, i.gpu_instance NULLS LAST, i.mig_uuid`, node)
	if err != nil {
		return nil, fmt.Errorf("list GPUs: %w", err)
	}
	defer rows.Close()
	// The join gives a partitioned GPU one row per instance: the GPU's own
	// entry comes first, then one per instance.
	var gpus []schedloop.GPU
	for rows.Next() {
		var g schedloop.GPU
		var hasInstance bool
		var instance, profile, migUUID string
		if err := rows.Scan(&g.UUID, &g.Node, &g.Index, &g.Model, &g.NVLinkDomain, &g.MIGProfile,
			&hasInstance, &instance, &profile, &migUUID); err != nil {
			return nil, fmt.Errorf("list GPUs: %w", err)
		}
		if len(gpus) == 0 || gpus[len(gpus)-1].UUID != g.UUID {
			gpus = append(gpus, g)
		}
		if hasInstance {
			g.Instance, g.MIGProfile, g.MIGUUID = instance, profile, migUUID
			gpus = append(gpus, g)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list GPUs: %w", err)
	}
	return gpus, nil
}
