package api_test

import (
	"slices"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

func TestAPIListsReservations(t *testing.T) {
	st := storetest.New(t)
	h := api.NewRouter(st, api.Options{})
	type listed struct {
		Reservations []struct {
			Scheduler, Job, Pod string
			GPUs                int
			Nodes               []string
			Domain              map[string]string
			Start, Since        time.Time
		}
	}
	var none listed
	if code := get(t, h, "/api/v1/reservations", nil, &none); code != 200 || none.Reservations == nil || len(none.Reservations) != 0 {
		t.Fatalf("no reservations: %d %+v, want 200 and an empty list", code, none)
	}
	at := time.Date(2026, 1, 1, 0, 3, 0, 0, time.UTC)
	if err := st.UpsertEvents(ctx, []schedloop.Event{{UID: "e1", Namespace: "default", InvolvedKind: "Pod",
		InvolvedName: "job-007-0", InvolvedUID: "u1", Reason: "Reserved", Type: "Normal", Source: "schedloop",
		Message: "reserved 2 node(s) from 2026-01-01T00:05:40Z (predicted start): n-a100-00 n-a100-01",
		Count:   1, FirstSeen: at, LastSeen: at}}); err != nil {
		t.Fatal(err)
	}
	var got listed
	if code := get(t, h, "/api/v1/reservations", nil, &got); code != 200 || len(got.Reservations) != 1 {
		t.Fatalf("one reservation: %d %+v", code, got)
	}
	r := got.Reservations[0]
	if r.Job != "default/job-007-0" || r.Pod != "default/job-007-0" || r.Scheduler != "schedloop" ||
		!slices.Equal(r.Nodes, []string{"n-a100-00", "n-a100-01"}) ||
		!r.Start.Equal(time.Date(2026, 1, 1, 0, 5, 40, 0, time.UTC)) || !r.Since.Equal(at) {
		t.Errorf("reservation %+v", r)
	}
}
