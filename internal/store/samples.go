package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/schedloop/schedloop"
)

var sampleColumns = []string{
	"ts", "gpu_uuid", "node", "gpu_index", "pod_namespace", "pod_name", "container",
	"gpu_util", "gr_engine_active", "sm_active", "fb_used_mib", "power_w",
	"gpu_instance", "gpu_instance_profile", "compute_share",
}

// CopyGPUSamples bulk-loads samples with COPY after making sure their days
// have partitions. It is all-or-nothing: on error no row of the batch is
// stored, so the caller can retry the same batch.
func (s *Store) CopyGPUSamples(ctx context.Context, samples []schedloop.GPUSample) (int64, error) {
	return s.CopyGPUSampleChunks(ctx, [][]schedloop.GPUSample{samples})
}

// CopyGPUSampleChunks is CopyGPUSamples of the chunks' samples in order, sent
// as they are: a batch gathered from many scrapes is not copied into one
// slice first.
func (s *Store) CopyGPUSampleChunks(ctx context.Context, chunks [][]schedloop.GPUSample) (int64, error) {
	days, err := sampleDays(chunks...)
	if err != nil {
		return 0, fmt.Errorf("copy GPU samples: %w", err)
	}
	if len(days) == 0 {
		return 0, nil
	}
	if err := s.ensureDayPartitions(ctx, days); err != nil {
		return 0, fmt.Errorf("copy GPU samples: %w", err)
	}
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("copy %d GPU samples: %w", n, err)
	}
	defer conn.Release()
	tag, err := conn.Conn().PgConn().CopyFrom(ctx, &sampleCopyReader{chunks: chunks}, copySamplesSQL)
	if err != nil {
		return 0, fmt.Errorf("copy %d GPU samples: %w", n, err)
	}
	return tag.RowsAffected(), nil
}

// sampleDays checks that every sample has a time and a GPU, and returns the
// UTC days the samples fall on. Only those days get partitions: a batch's
// time span could be years wide when one exporter's clock is wrong, and a
// partition for every day in between would exhaust Postgres's lock table.
func sampleDays(chunks ...[]schedloop.GPUSample) ([]time.Time, error) {
	var days []time.Time
	var last time.Time
	i := 0
	for _, samples := range chunks {
		for j := range samples {
			t := samples[j].Time
			if t.IsZero() {
				return nil, fmt.Errorf("sample %d (GPU %q) has no timestamp", i, samples[j].GPUUUID)
			}
			if samples[j].GPUUUID == "" {
				return nil, fmt.Errorf("sample %d at %s has no GPU UUID", i, t.Format(time.RFC3339))
			}
			i++
			// Scrapes arrive in time order, so comparing with the previous
			// sample's day settles almost every sample without a search.
			if d := dayOf(t); !d.Equal(last) {
				last = d
				if !slices.ContainsFunc(days, d.Equal) {
					days = append(days, d)
				}
			}
		}
	}
	return days, nil
}

// RollupGPUMinutes folds raw samples in [from, to) into gpu_minutes. It is
// idempotent: re-running it over the same range recomputes the same rows, so
// a late sample is absorbed by rolling its minute up again.
func (s *Store) RollupGPUMinutes(ctx context.Context, from, to time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, rollupMinutesSQL, from, to)
	if err != nil {
		return 0, fmt.Errorf("roll up GPU samples %s..%s: %w", from.Format(time.RFC3339), to.Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}

// The holder of a GPU (or of a MIG instance: each is its own row) in a
// minute is the pod seen in most of its samples (ties go to the smaller
// namespace/name, so reruns agree); a GPU shared between pods inside one
// minute is rare enough that per-minute attribution is what dashboards want.
const rollupMinutesSQL = `
INSERT INTO gpu_minutes AS m (minute, gpu_uuid, gpu_instance, gpu_instance_profile, compute_share, node,
    pod_namespace, pod_name, samples, gpu_util_avg, gr_engine_active_avg, sm_active_avg, fb_used_mib_max, power_w_avg)
SELECT minute, gpu_uuid, gpu_instance, profile, share, node, holder[1], holder[2], samples, util, gr, sm, fb, pw
FROM (
    SELECT date_trunc('minute', ts) AS minute, gpu_uuid, gpu_instance,
           max(gpu_instance_profile) AS profile, max(compute_share) AS share,
           max(node) AS node,
           mode() WITHIN GROUP (ORDER BY ARRAY[pod_namespace, pod_name]) AS holder,
           count(*) AS samples,
           avg(gpu_util) AS util, avg(gr_engine_active) AS gr, avg(sm_active) AS sm,
           max(fb_used_mib) AS fb, avg(power_w) AS pw
    FROM gpu_samples
    WHERE ts >= $1 AND ts < $2
    GROUP BY 1, 2, 3
) g
ON CONFLICT (gpu_uuid, minute, gpu_instance) DO UPDATE SET
    gpu_instance_profile = EXCLUDED.gpu_instance_profile,
    compute_share = EXCLUDED.compute_share,
    node = EXCLUDED.node,
    pod_namespace = EXCLUDED.pod_namespace,
    pod_name = EXCLUDED.pod_name,
    samples = EXCLUDED.samples,
    gpu_util_avg = EXCLUDED.gpu_util_avg,
    gr_engine_active_avg = EXCLUDED.gr_engine_active_avg,
    sm_active_avg = EXCLUDED.sm_active_avg,
    fb_used_mib_max = EXCLUDED.fb_used_mib_max,
    power_w_avg = EXCLUDED.power_w_avg`

// GPUMinute is one row of the per-minute rollup: a whole GPU's, or with
// GPUInstance set a MIG instance's.
type GPUMinute struct {
	Minute             time.Time
	GPUUUID            string
	GPUInstance        string
	GPUInstanceProfile string
	// ComputeShare is the instance's share of its GPU's compute; 1 for a
	// whole GPU.
	ComputeShare      float64
	Node              string
	PodNamespace      string
	PodName           string
	Samples           int
	GPUUtilAvg        float64
	GrEngineActiveAvg float64
	SMActiveAvg       float64
	FBUsedMiBMax      float64
	PowerWattsAvg     float64
}

// GPUMinutes reads one GPU's rollup over [from, to), its instances' rows
// after the whole GPU's in each minute.
func (s *Store) GPUMinutes(ctx context.Context, gpuUUID string, from, to time.Time) ([]GPUMinute, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT minute, gpu_uuid, gpu_instance, gpu_instance_profile, compute_share, node, pod_namespace, pod_name,
		       samples, gpu_util_avg, gr_engine_active_avg, sm_active_avg, fb_used_mib_max, power_w_avg
		FROM gpu_minutes WHERE gpu_uuid = $1 AND minute >= $2 AND minute < $3 ORDER BY minute, gpu_instance`, gpuUUID, from, to)
	if err != nil {
		return nil, fmt.Errorf("read GPU minutes of %s: %w", gpuUUID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (GPUMinute, error) {
		var m GPUMinute
		var share, util, gr, sm, fb, pw float32
		err := r.Scan(&m.Minute, &m.GPUUUID, &m.GPUInstance, &m.GPUInstanceProfile, &share, &m.Node, &m.PodNamespace, &m.PodName,
			&m.Samples, &util, &gr, &sm, &fb, &pw)
		m.ComputeShare, m.GPUUtilAvg, m.GrEngineActiveAvg, m.SMActiveAvg, m.FBUsedMiBMax, m.PowerWattsAvg =
			float64(share), float64(util), float64(gr), float64(sm), float64(fb), float64(pw)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("read GPU minutes of %s: %w", gpuUUID, err)
	}
	return out, nil
}

// CountGPUSamples counts raw samples in [from, to); tests and the collector's
// loss accounting use it.
func (s *Store) CountGPUSamples(ctx context.Context, from, to time.Time) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM gpu_samples WHERE ts >= $1 AND ts < $2`, from, to).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count GPU samples: %w", err)
	}
	return n, nil
}
