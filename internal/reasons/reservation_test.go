package reasons

import (
	"slices"
	"testing"
	"time"
)

func TestParseReservation(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		in   string
		want Reservation
		ok   bool
	}{
		// The note of a Reserved Event as the scheduler writes it
		// (internal/schedplugins/reservation, Held.Message).
		{"reserved 2 node(s) from 2026-01-01T00:05:40Z (predicted start): n-a100-00 n-a100-01",
			Reservation{Start: at("2026-01-01T00:05:40Z"), Nodes: []string{"n-a100-00", "n-a100-01"}}, true},
		{"reserved 1 node(s) from 2026-12-05T03:00:00Z (predicted start): gpu-7.example",
			Reservation{Start: at("2026-12-05T03:00:00Z"), Nodes: []string{"gpu-7.example"}}, true},
		{"reserved 3 node(s) from 2026-01-01T00:05:40Z (predicted start): a b", Reservation{}, false},
		{"reserved 1 node(s) from yesterday (predicted start): a", Reservation{}, false},
		{"reserved 99999999999999999999 node(s) from 2026-01-01T00:05:40Z (predicted start): a", Reservation{}, false},
		{"reserved 1 node(s) from 2026-01-01T00:05:40Z (predicted start): ", Reservation{}, false},
		{"reservation released: the job no longer fits", Reservation{}, false},
		{"", Reservation{}, false},
	}
	for _, tc := range tests {
		got, ok := ParseReservation(tc.in)
		if ok != tc.ok || !got.Start.Equal(tc.want.Start) || !slices.Equal(got.Nodes, tc.want.Nodes) {
			t.Errorf("ParseReservation(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReservationRoundTrip(t *testing.T) {
	r := Reservation{Start: time.Date(2026, 1, 1, 0, 5, 40, 0, time.UTC), Nodes: []string{"a", "b"}}
	got, ok := ParseReservation(r.String())
	if !ok || !got.Start.Equal(r.Start) || !slices.Equal(got.Nodes, r.Nodes) {
		t.Errorf("round trip of %q: %+v, %v", r.String(), got, ok)
	}
}

func FuzzParseReservation(f *testing.F) {
	f.Add("reserved 2 node(s) from 2026-01-01T00:05:40Z (predicted start): n-a100-00 n-a100-01")
	f.Add("reserved 1 node(s) from x (predicted start): a")
	f.Fuzz(func(t *testing.T, s string) {
		r, ok := ParseReservation(s)
		if !ok {
			return
		}
		again, ok := ParseReservation(r.String())
		if !ok || !again.Start.Equal(r.Start) || !slices.Equal(again.Nodes, r.Nodes) {
			t.Errorf("%q parsed to %+v, which does not read back: %+v, %v", s, r, again, ok)
		}
	})
}
