package store_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

func TestCopyOneMillionSamples(t *testing.T) {
	s := storetest.New(t)
	const n = 1_000_000
	// 1,000 GPUs scraped every 15 s for 1,000 scrapes: 4h10m starting 22:00,
	// so the batch spans two daily partitions.
	start := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)
	samples := storetest.Samples(n, 1000, start, 15*time.Second)
	began := time.Now()
	copied, err := s.CopyGPUSamples(ctx, samples)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copied %d samples in %v (%.0f rows/s)", copied, time.Since(began), float64(copied)/time.Since(began).Seconds())
	if copied != n {
		t.Fatalf("copied %d rows, want %d", copied, n)
	}
	end := samples[n-1].Time.Add(time.Second)
	if got, err := s.CountGPUSamples(ctx, start, end); err != nil || got != n {
		t.Fatalf("stored %d rows (err %v), want %d", got, err, n)
	}
	var inDefault int64
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM gpu_samples_default`).Scan(&inDefault); err != nil {
		t.Fatal(err)
	}
	if inDefault != 0 {
		t.Errorf("%d rows fell into the default partition; daily partitions should have been created first", inDefault)
	}
	for _, day := range []string{"gpu_samples_p20261130", "gpu_samples_p20261201"} {
		if !tableExists(t, s, day) {
			t.Errorf("partition %s was not created", day)
		}
	}
	began = time.Now()
	rolled, err := s.RollupGPUMinutes(ctx, start, end)
	t.Logf("rolled up in %v", time.Since(began))
	if err != nil {
		t.Fatal(err)
	}
	// 1,000 scrapes at 15 s are 250 minutes, for each of 1,000 GPUs.
	if rolled != 250_000 {
		t.Errorf("rollup wrote %d GPU-minutes, want 250000", rolled)
	}
}

func TestRollupAveragesEachMinute(t *testing.T) {
	s := storetest.New(t)
	m0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	at := func(sec int) time.Time { return m0.Add(time.Duration(sec) * time.Second) }
	samples := []schedloop.GPUSample{
		{Time: at(0), GPUUUID: "GPU-a", Node: "n1", PodNamespace: "ml", PodName: "p1", GPUUtil: 100, GrEngineActive: 1, SMActive: 0.5, FBUsedMiB: 100, PowerWatts: 300},
		{Time: at(20), GPUUUID: "GPU-a", Node: "n1", PodNamespace: "ml", PodName: "p1", GPUUtil: 50, GrEngineActive: 0.5, SMActive: 0.25, FBUsedMiB: 400, PowerWatts: 200},
		{Time: at(40), GPUUUID: "GPU-a", Node: "n1", PodNamespace: "ml", PodName: "p2", GPUUtil: 0, GrEngineActive: 0, SMActive: 0, FBUsedMiB: 50, PowerWatts: 100},
		{Time: at(60), GPUUUID: "GPU-a", Node: "n1", GPUUtil: 0, PowerWatts: 60},
	}
	if _, err := s.CopyGPUSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RollupGPUMinutes(ctx, m0, m0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Rolling up the same range again must not change anything.
	if _, err := s.RollupGPUMinutes(ctx, m0, m0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err := s.GPUMinutes(ctx, "GPU-a", m0, m0.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := []store.GPUMinute{
		{Minute: m0, GPUUUID: "GPU-a", Node: "n1", PodNamespace: "ml", PodName: "p1", Samples: 3,
			GPUUtilAvg: 50, GrEngineActiveAvg: 0.5, SMActiveAvg: 0.25, FBUsedMiBMax: 400, PowerWattsAvg: 200},
		{Minute: m0.Add(time.Minute), GPUUUID: "GPU-a", Node: "n1", Samples: 1, PowerWattsAvg: 60},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d minutes, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if !g.Minute.Equal(w.Minute) || g.GPUUUID != w.GPUUUID || g.Node != w.Node || g.PodNamespace != w.PodNamespace ||
			g.PodName != w.PodName || g.Samples != w.Samples {
			t.Errorf("minute %d = %+v, want %+v", i, g, w)
		}
		for _, f := range []struct {
			name      string
			got, want float64
		}{
			{"gpu_util_avg", g.GPUUtilAvg, w.GPUUtilAvg}, {"gr_engine_active_avg", g.GrEngineActiveAvg, w.GrEngineActiveAvg},
			{"sm_active_avg", g.SMActiveAvg, w.SMActiveAvg}, {"fb_used_mib_max", g.FBUsedMiBMax, w.FBUsedMiBMax},
			{"power_w_avg", g.PowerWattsAvg, w.PowerWattsAvg},
		} {
			if math.Abs(f.got-f.want) > 1e-4 {
				t.Errorf("minute %d %s = %v, want %v", i, f.name, f.got, f.want)
			}
		}
	}
}

func TestCopyRejectsIncompleteSamples(t *testing.T) {
	s := storetest.New(t)
	tests := []struct {
		name   string
		sample schedloop.GPUSample
		want   string
	}{
		{"no time", schedloop.GPUSample{GPUUUID: "GPU-a"}, "has no timestamp"},
		{"no uuid", schedloop.GPUSample{Time: t0}, "has no GPU UUID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			good := schedloop.GPUSample{Time: t0, GPUUUID: "GPU-ok"}
			_, err := s.CopyGPUSamples(ctx, []schedloop.GPUSample{good, tc.sample})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "sample 1") {
				t.Fatalf("err = %v, want it to name sample 1 and say %q", err, tc.want)
			}
		})
	}
	// All-or-nothing: the good sample of the rejected batches is not stored.
	if n, err := s.CountGPUSamples(ctx, t0.Add(-time.Hour), t0.Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("after rejected batches %d rows stored (err %v), want 0", n, err)
	}
}

func TestStrayDefaultRowsMoveIntoNewPartition(t *testing.T) {
	s := storetest.New(t)
	day := time.Date(2026, 12, 24, 0, 0, 0, 0, time.UTC)
	// A writer that bypassed the store lands in the default partition.
	if _, err := s.Pool().Exec(ctx, `INSERT INTO gpu_samples (ts, gpu_uuid) VALUES ($1, 'GPU-stray'), ($2, 'GPU-stray')`,
		day.Add(time.Hour), day.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CopyGPUSamples(ctx, []schedloop.GPUSample{{Time: day.Add(3 * time.Hour), GPUUUID: "GPU-new"}}); err != nil {
		t.Fatalf("creating the partition over stray rows: %v", err)
	}
	var inDay, inDefault int64
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM gpu_samples_p20261224`).Scan(&inDay); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM gpu_samples_default`).Scan(&inDefault); err != nil {
		t.Fatal(err)
	}
	if inDay != 3 || inDefault != 0 {
		t.Errorf("day partition has %d rows, default %d; want 3 and 0", inDay, inDefault)
	}
}

func TestDropSamplePartitionsBefore(t *testing.T) {
	s := storetest.New(t)
	d := func(day int) time.Time { return time.Date(2026, 11, day, 12, 0, 0, 0, time.UTC) }
	var batch []schedloop.GPUSample
	for day := 1; day <= 4; day++ {
		batch = append(batch, schedloop.GPUSample{Time: d(day), GPUUUID: "GPU-a"})
	}
	if _, err := s.CopyGPUSamples(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// A cutoff in the middle of day 3 keeps day 3: only whole days go.
	dropped, err := s.DropSamplePartitionsBefore(ctx, d(3))
	if err != nil {
		t.Fatal(err)
	}
	if dropped != 2 {
		t.Errorf("dropped %d partitions, want 2 (days 1 and 2)", dropped)
	}
	if n, _ := s.CountGPUSamples(ctx, d(1).Add(-24*time.Hour), d(4).Add(time.Hour)); n != 2 {
		t.Errorf("%d samples left, want 2", n)
	}
	// The store must notice the dropped days are gone and recreate them.
	if _, err := s.CopyGPUSamples(ctx, batch[:1]); err != nil {
		t.Fatalf("re-ingesting a dropped day: %v", err)
	}
	if !tableExists(t, s, "gpu_samples_p20261101") {
		t.Error("partition for a dropped day was not recreated")
	}
}

// TestCopiedSamplesReadBackExactly checks the binary COPY encoding against
// what Postgres stores: every column, odd values included.
func TestCopiedSamplesReadBackExactly(t *testing.T) {
	s := storetest.New(t)
	day := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	in := []schedloop.GPUSample{
		{Time: day.Add(123_456_789 * time.Nanosecond), GPUUUID: "GPU-a", Node: "node-1", GPUIndex: 7, PodNamespace: "ml",
			PodName: "train-0", Container: "main", GPUUtil: 0.1, GrEngineActive: 0.25, SMActive: 1, FBUsedMiB: 81559, PowerWatts: 312.7},
		{Time: day.Add(-time.Microsecond), GPUUUID: "GPU-ü-ß", Node: "", GPUIndex: 0, PodName: strings.Repeat("x", 100_000),
			GPUUtil: math.MaxFloat32, PowerWatts: -1.5},
		{Time: day.Add(-time.Hour + 999), GPUUUID: "GPU-c", GPUIndex: 32767},
	}
	if _, err := s.CopyGPUSamples(ctx, in); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Pool().Query(ctx, `SELECT ts, gpu_uuid, node, gpu_index, pod_namespace, pod_name, container,
		gpu_util, gr_engine_active, sm_active, fb_used_mib, power_w FROM gpu_samples ORDER BY gpu_uuid`)
	if err != nil {
		t.Fatal(err)
	}
	var got []schedloop.GPUSample
	for rows.Next() {
		var g schedloop.GPUSample
		var idx int16
		var f [5]float32
		if err := rows.Scan(&g.Time, &g.GPUUUID, &g.Node, &idx, &g.PodNamespace, &g.PodName, &g.Container, &f[0], &f[1], &f[2], &f[3], &f[4]); err != nil {
			t.Fatal(err)
		}
		g.GPUIndex = int(idx)
		g.GPUUtil, g.GrEngineActive, g.SMActive, g.FBUsedMiB, g.PowerWatts = float64(f[0]), float64(f[1]), float64(f[2]), float64(f[3]), float64(f[4])
		got = append(got, g)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(in) {
		t.Fatalf("read back %d rows, want %d", len(got), len(in))
	}
	order := []int{0, 2, 1} // by gpu_uuid
	for i, j := range order {
		w := in[j]
		w.Time = w.Time.Truncate(time.Microsecond)
		for _, v := range []*float64{&w.GPUUtil, &w.GrEngineActive, &w.SMActive, &w.FBUsedMiB, &w.PowerWatts} {
			*v = float64(float32(*v))
		}
		g := got[i]
		if !g.Time.Equal(w.Time) {
			t.Errorf("row %s: ts %s, want %s", w.GPUUUID, g.Time, w.Time)
		}
		g.Time = w.Time
		if g != w {
			t.Errorf("row %s read back as\n%+v\nwant\n%+v", w.GPUUUID, trimmed(g), trimmed(w))
		}
	}
}

func trimmed(s schedloop.GPUSample) schedloop.GPUSample {
	if len(s.PodName) > 40 {
		s.PodName = s.PodName[:40] + "..."
	}
	return s
}

// TestStraySampleTimeMakesOnePartition: one exporter with a clock decades
// off must cost one partition for its day, not one per day in between.
func TestStraySampleTimeMakesOnePartition(t *testing.T) {
	s := storetest.New(t)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	stray := time.Date(1970, 1, 1, 0, 0, 5, 0, time.UTC)
	batch := []schedloop.GPUSample{{Time: now, GPUUUID: "GPU-a"}, {Time: stray, GPUUUID: "GPU-b"}, {Time: now.Add(time.Second), GPUUUID: "GPU-a"}}
	if _, err := s.CopyGPUSamples(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CopyGPUSamplesOnce(ctx, "stray-batch", []schedloop.GPUSample{{Time: stray.AddDate(1, 0, 0), GPUUUID: "GPU-c"}, {Time: now, GPUUUID: "GPU-c"}}); err != nil {
		t.Fatal(err)
	}
	// Nor does a day in the year 287168.
	future := time.Date(287168, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.CopyGPUSamples(ctx, []schedloop.GPUSample{{Time: future, GPUUUID: "GPU-d"}}); err != nil {
		t.Fatal(err)
	}
	var parts []string
	rows, err := s.Pool().Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'gpu_samples'::regclass AND c.relname <> 'gpu_samples_default' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, name)
	}
	// Days before 2000 get no table of their own: their rows are kept in
	// the default partition.
	want := []string{"gpu_samples_p20260501"}
	if strings.Join(parts, " ") != strings.Join(want, " ") {
		t.Errorf("partitions %v, want %v", parts, want)
	}
	if n, err := s.CountGPUSamples(ctx, stray.Add(-time.Hour), now.Add(time.Hour)); err != nil || n != 5 {
		t.Errorf("stored %d samples (err %v), want 5", n, err)
	}
}
