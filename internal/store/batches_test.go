package store_test

import (
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestLostCommitAcknowledgement: Postgres commits a batch, the connection
// drops before the client reads the acknowledgement; sent again under the
// same id, the batch is recognised and stored once.
func TestLostCommitAcknowledgement(t *testing.T) {
	direct := storetest.New(t)
	drop, url := storetest.NewAckDropper(t, direct.Pool().Config().ConnString(), 1, 1)
	s := storetest.Open(t, url)
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	samples := storetest.Samples(500, 50, t0, 15*time.Second)

	if _, err := s.CopyGPUSamplesOnce(ctx, "batch/a", samples); err == nil {
		t.Fatalf("the first COPY reported success though its acknowledgement was dropped (%d dropped)", drop.Dropped())
	}
	if drop.Dropped() != 1 {
		t.Fatalf("%d acknowledgements dropped; want 1", drop.Dropped())
	}
	stored, err := s.CopyGPUSamplesOnce(ctx, "batch/a", samples)
	if err != nil {
		t.Fatalf("sending the batch again: %v", err)
	}
	if stored {
		t.Errorf("the batch sent again was stored again")
	}
	n, err := direct.CountGPUSamples(ctx, t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(samples)) {
		t.Errorf("%d samples stored; want %d", n, len(samples))
	}
}
