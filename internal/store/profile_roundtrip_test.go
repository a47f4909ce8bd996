package store_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// TestProfileRoundTripEveryParam stores a profile whose every parameter is
// set to a non-zero value and reads it back: a profile published again
// from the store must mean what it meant when the tuner proposed it. The
// check that every field of scoring.Params is non-zero makes a parameter
// added later fail here until the store carries it.
func TestProfileRoundTripEveryParam(t *testing.T) {
	want := scoring.Params{
		Weights:              scoring.Weights{scoring.TermTopology: 7, scoring.TermBestFit: 1.5},
		Queues:               map[string]scoring.QueueLimit{"research": {MaxGPUs: 64, MaxRunningGangs: 3}},
		GangTimeout:          90 * time.Second,
		Order:                scoring.OrderFairShare,
		StarvationBound:      2 * time.Hour,
		Reservation:          true,
		ReservationThreshold: 15 * time.Minute,
		PreemptMinRunTime:    10 * time.Minute,
	}
	v := reflect.ValueOf(want)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("scoring.Params.%s is zero in the round-trip profile: give it a non-zero value", v.Type().Field(i).Name)
		}
	}
	if err := want.Validate(); err != nil {
		t.Fatal(err)
	}
	doc := profile.FromParams("every-param", want)

	s := storetest.New(t)
	id, err := s.InsertProfile(ctx, doc.ToDomain())
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.GetProfile(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	back := profile.FromDomain(stored)
	if diff := cmp.Diff(doc, back); diff != "" {
		t.Errorf("document after Postgres (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(want, back.Params()); diff != "" {
		t.Errorf("parameters after Postgres (-before +after):\n%s", diff)
	}
	if err := back.Validate(); err != nil {
		t.Errorf("the stored profile no longer validates: %v", err)
	}
}
