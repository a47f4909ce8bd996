package collector_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/schedloop/schedloop/internal/collector"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestLostCommitAcknowledgementStoresOnce: the ingester writes to real
// Postgres through a proxy that drops the connection after Postgres
// commits every other batch and before the acknowledgement reaches the
// collector. Each such batch is sent again and must be recognised, not
// stored twice; nothing is lost.
func TestLostCommitAcknowledgementStoresOnce(t *testing.T) {
	direct := storetest.New(t)
	drop, url := storetest.NewAckDropper(t, direct.Pool().Config().ConnString(), 2, 4)
	s := storetest.Open(t, url)
	m := collector.NewMetrics()
	in, err := collector.NewIngester(s, collector.IngestOptions{BatchSamples: 1000, Writers: 2,
		FlushInterval: 10 * time.Millisecond, Backoff: &fastBackoff, Permanent: store.Permanent, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { in.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// 10 scrape rounds of 1,000 GPUs, each sample distinct by GPU and time.
	t0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	const rounds, gpus = 10, 1000
	for i := range rounds {
		in.Add(storetest.Samples(gpus, gpus, t0.Add(time.Duration(i)*time.Second), time.Second))
	}
	in.Flush()
	waitFor(t, "every sample to settle", 30*time.Second, func() bool {
		return testutil.ToFloat64(m.Written)+testutil.ToFloat64(m.Duplicates) >= rounds*gpus
	})

	var total, distinct int64
	if err := direct.Pool().QueryRow(context.Background(),
		`SELECT count(*), count(DISTINCT (gpu_uuid, ts)) FROM gpu_samples`).Scan(&total, &distinct); err != nil {
		t.Fatal(err)
	}
	if drop.Dropped() == 0 {
		t.Fatalf("no acknowledgement was dropped: the test proved nothing")
	}
	if total != rounds*gpus || distinct != rounds*gpus {
		t.Errorf("%d samples stored (%d distinct) after %d lost acknowledgements; want %d, none twice",
			total, distinct, drop.Dropped(), rounds*gpus)
	}
	if d := testutil.ToFloat64(m.Duplicates); d == 0 {
		t.Errorf("no batch sent again was recognised as stored (%d acknowledgements lost)", drop.Dropped())
	}
}
