package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/dra"
)

// A claim's state, node, consumers and what it asks are its latest; its
// devices are its last allocation's, kept once it is released; each time
// is the first seen, except that a claim allocated again after a release
// is no longer deallocated.
const upsertClaimSQL = `
INSERT INTO resource_claims (uid, namespace, name, state, node, reserved_for, devices, device_uuids, lost_devices,
    gpus, mig_instances, created_at, allocated_at, reserved_at, deallocated_at, deleted_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
ON CONFLICT (uid) DO UPDATE SET
    state = EXCLUDED.state,
    node = CASE WHEN EXCLUDED.node = '' THEN resource_claims.node ELSE EXCLUDED.node END,
    reserved_for = EXCLUDED.reserved_for,
    devices = CASE WHEN cardinality(EXCLUDED.devices) > 0 THEN EXCLUDED.devices ELSE resource_claims.devices END,
    device_uuids = CASE WHEN cardinality(EXCLUDED.device_uuids) > 0 THEN EXCLUDED.device_uuids ELSE resource_claims.device_uuids END,
    lost_devices = CASE WHEN cardinality(EXCLUDED.devices) > 0 OR EXCLUDED.state IN ('pending', 'allocated', 'reserved')
                        THEN EXCLUDED.lost_devices ELSE resource_claims.lost_devices END,
    gpus = EXCLUDED.gpus,
    mig_instances = EXCLUDED.mig_instances,
    created_at = least(resource_claims.created_at, EXCLUDED.created_at),
    allocated_at = coalesce(resource_claims.allocated_at, EXCLUDED.allocated_at),
    reserved_at = coalesce(resource_claims.reserved_at, EXCLUDED.reserved_at),
    deallocated_at = CASE WHEN EXCLUDED.state IN ('allocated', 'reserved') THEN NULL
                          ELSE coalesce(resource_claims.deallocated_at, EXCLUDED.deallocated_at) END,
    deleted_at = coalesce(resource_claims.deleted_at, EXCLUDED.deleted_at)`

// UpsertResourceClaims stores claims with their lifecycle.
func (s *Store) UpsertResourceClaims(ctx context.Context, claims []schedloop.ResourceClaim) error {
	b := &pgx.Batch{}
	for _, c := range claims {
		if c.UID == "" {
			return fmt.Errorf("store ResourceClaim %s/%s: uid is empty", c.Namespace, c.Name)
		}
		if c.CreatedAt.IsZero() {
			return fmt.Errorf("store ResourceClaim %s/%s: created_at is zero", c.Namespace, c.Name)
		}
		switch c.State {
		case schedloop.ClaimPending, schedloop.ClaimAllocated, schedloop.ClaimReserved, schedloop.ClaimDeallocated, schedloop.ClaimDeleted:
		default:
			return fmt.Errorf("store ResourceClaim %s/%s: state %q is none of pending, allocated, reserved, deallocated, deleted", c.Namespace, c.Name, c.State)
		}
		b.Queue(upsertClaimSQL, c.UID, c.Namespace, c.Name, string(c.State), c.Node, orEmptyStrings(c.ReservedFor), orEmptyStrings(c.Devices),
			orEmptyStrings(c.DeviceUUIDs), orEmptyStrings(c.LostDevices), c.GPUs, c.MIGInstances, c.CreatedAt,
			nullTime(c.AllocatedAt), nullTime(c.ReservedAt), nullTime(c.DeallocatedAt), nullTime(c.DeletedAt))
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("store %d ResourceClaims: %w", len(claims), err)
	}
	return nil
}

// ResourceClaims returns the stored claims of namespace (every namespace
// when empty), by creation.
func (s *Store) ResourceClaims(ctx context.Context, namespace string) ([]schedloop.ResourceClaim, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT uid, namespace, name, state, node, reserved_for, devices, device_uuids, lost_devices, gpus, mig_instances,
		       created_at, allocated_at, reserved_at, deallocated_at, deleted_at
		FROM resource_claims WHERE $1 = '' OR namespace = $1 ORDER BY created_at, uid`, namespace)
	if err != nil {
		return nil, fmt.Errorf("read ResourceClaims: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schedloop.ResourceClaim, error) {
		var c schedloop.ResourceClaim
		var state string
		var alloc, reserved, dealloc, deleted pgtype.Timestamptz
		err := r.Scan(&c.UID, &c.Namespace, &c.Name, &state, &c.Node, &c.ReservedFor, &c.Devices, &c.DeviceUUIDs, &c.LostDevices,
			&c.GPUs, &c.MIGInstances, &c.CreatedAt, &alloc, &reserved, &dealloc, &deleted)
		c.State = schedloop.ClaimState(state)
		c.AllocatedAt, c.ReservedAt, c.DeallocatedAt, c.DeletedAt = fromNullTime(alloc), fromNullTime(reserved), fromNullTime(dealloc), fromNullTime(deleted)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read ResourceClaims: %w", err)
	}
	return out, nil
}

// queueDRAInstances queues the inventory rows of the MIG instances among
// devices, under their parent GPU (stored by then from the same slices), by
// MIG UUID: the driver publishes no GPU instance id, which telemetry fills
// in when it names the same UUID. An instance no slice publishes any more
// is marked gone, kept with what it last was. One whose profile has no
// compute share on its GPU's model is left out: its slice problem is
// stored with the device.
func queueDRAInstances(b *pgx.Batch, devices []schedloop.DRADevice, at time.Time) {
	for _, d := range devices {
		if d.Driver != dra.Driver || d.Type != dra.TypeMIG || d.UUID == "" || d.ParentUUID == "" || d.Profile == "" {
			continue
		}
		share, err := schedloop.MIGComputeShare(d.Product, d.Profile)
		if err != nil {
			continue
		}
		b.Queue(`
			INSERT INTO gpu_instances (gpu_uuid, profile, compute_share, mig_uuid, first_seen)
			SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM gpus WHERE uuid = $1)
			ON CONFLICT (mig_uuid) DO UPDATE SET profile = EXCLUDED.profile, compute_share = EXCLUDED.compute_share,
			    first_seen = CASE WHEN gpu_instances.gone_at IS NULL THEN gpu_instances.first_seen ELSE EXCLUDED.first_seen END,
			    gone_at = NULL`,
			d.ParentUUID, d.Profile, share, d.UUID, at)
	}
	b.Queue(`
		UPDATE gpu_instances i SET gone_at = $1
		WHERE i.gone_at IS NULL
		  AND EXISTS (SELECT 1 FROM dra_devices d WHERE d.uuid = i.mig_uuid AND d.type = $2)
		  AND NOT EXISTS (SELECT 1 FROM dra_devices d WHERE d.uuid = i.mig_uuid AND d.type = $2 AND d.gone_at IS NULL)`,
		at, dra.TypeMIG)
}

// ReplaceDRADevices stores devices as every device the slices publish at
// at: each is upserted as seen then, and a stored device not among them is
// marked gone from then on (kept, with what it last was).
func (s *Store) ReplaceDRADevices(ctx context.Context, devices []schedloop.DRADevice, at time.Time) error {
	b := &pgx.Batch{}
	keys := make([]string, 0, len(devices))
	for _, d := range devices {
		b.Queue(`
			INSERT INTO dra_devices (driver, pool, device, node, type, uuid, parent_uuid, product, profile, clique, memory_bytes,
			    unknown, problems, first_seen, last_seen)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14)
			ON CONFLICT (driver, pool, device) DO UPDATE SET
			    node = EXCLUDED.node, type = EXCLUDED.type, uuid = EXCLUDED.uuid, parent_uuid = EXCLUDED.parent_uuid,
			    product = EXCLUDED.product, profile = EXCLUDED.profile, clique = EXCLUDED.clique,
			    memory_bytes = EXCLUDED.memory_bytes, unknown = EXCLUDED.unknown, problems = EXCLUDED.problems,
			    last_seen = greatest(dra_devices.last_seen, EXCLUDED.last_seen), gone_at = NULL`,
			d.Driver, d.Pool, d.Device, d.Node, d.Type, d.UUID, d.ParentUUID, d.Product, d.Profile, d.Clique, d.MemoryBytes,
			orEmptyStrings(d.Unknown), orEmptyStrings(d.Problems), at)
		keys = append(keys, d.Driver+"/"+d.Pool+"/"+d.Device)
	}
	b.Queue(`UPDATE dra_devices SET gone_at = $2
		WHERE gone_at IS NULL AND NOT (driver || '/' || pool || '/' || device = ANY($1))`, keys, at)
	queueDRAInstances(b, devices, at)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("store %d DRA devices: %w", len(devices), err)
	}
	return nil
}

// DRADevices returns the stored devices of node (every node when empty),
// those gone included, with whether each is gone.
func (s *Store) DRADevices(ctx context.Context, node string) (devs []schedloop.DRADevice, gone []bool, err error) {
	rows, err := s.pool.Query(ctx, `
		SELECT driver, pool, device, node, type, uuid, parent_uuid, product, profile, clique, memory_bytes, unknown, problems,
		       gone_at IS NOT NULL
		FROM dra_devices WHERE $1 = '' OR node = $1 ORDER BY driver, pool, device`, node)
	if err != nil {
		return nil, nil, fmt.Errorf("read DRA devices: %w", err)
	}
	var d schedloop.DRADevice
	var g bool
	_, err = pgx.ForEachRow(rows, []any{&d.Driver, &d.Pool, &d.Device, &d.Node, &d.Type, &d.UUID, &d.ParentUUID, &d.Product,
		&d.Profile, &d.Clique, &d.MemoryBytes, &d.Unknown, &d.Problems, &g}, func() error {
		devs, gone = append(devs, d), append(gone, g)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read DRA devices: %w", err)
	}
	return devs, gone, nil
}
