package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// reservedNote is a Reserved Event's note as the scheduler writes it.
const reservedNote = "reserved 2 node(s) from 2026-01-01T01:00:00Z (predicted start): n1 n2"

func reservationEvent(uid, pod, podUID, reason, note string, first, last time.Time) schedloop.Event {
	return schedloop.Event{UID: uid, Namespace: "ml", InvolvedKind: "Pod", InvolvedName: pod, InvolvedUID: podUID,
		Reason: reason, Type: "Normal", Message: note, Source: "schedloop", Count: 1, FirstSeen: first, LastSeen: last}
}

func TestActiveReservations(t *testing.T) {
	s := storetest.New(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	if err := s.UpsertNodes(ctx, []schedloop.Node{
		{Name: "n1", Topology: map[string]string{"rack": "r1", "spine": "s1"}, Ready: true},
		{Name: "n2", Topology: map[string]string{"rack": "r2", "spine": "s1"}, Ready: true},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertJobs(ctx, []schedloop.Job{{UID: "job-big", Namespace: "ml", Name: "big", Kind: schedloop.JobKindGang,
		MinMember: 2, GPUsPerMember: 8, Created: at(0)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertPods(ctx, []schedloop.Pod{
		{UID: "pod-big-0", Namespace: "ml", Name: "big-0", JobUID: "job-big", GPUs: 8, Created: at(0), Phase: schedloop.PhasePending},
		{UID: "pod-old", Namespace: "ml", Name: "old", GPUs: 8, Created: at(0), Phase: schedloop.PhasePending},
	}); err != nil {
		t.Fatal(err)
	}
	// old held the reservation first and passed it on; big held it, lost
	// it (released), and holds it again from minute 7, planned anew at 9.
	events := []schedloop.Event{
		reservationEvent("e1", "old", "pod-old", "Reserved", "reserved 1 node(s) from 2026-01-01T00:30:00Z (predicted start): n1", at(1), at(1)),
		reservationEvent("e2", "old", "pod-old", "ReservationReleased", "reservation passed to ml/big, ahead in the order", at(2), at(2)),
		reservationEvent("e3", "big-0", "pod-big-0", "Reserved", "reserved 2 node(s) from 2026-01-01T00:50:00Z (predicted start): n1 n2", at(2), at(3)),
		reservationEvent("e4", "big-0", "pod-big-0", "ReservationReleased", "reservation released: the job no longer fits even once every running job has ended", at(5), at(5)),
		reservationEvent("e5", "big-0", "pod-big-0", "Reserved", "reserved 2 node(s) from 2026-01-01T00:55:00Z (predicted start): n1 n2", at(7), at(7)),
		reservationEvent("e6", "big-0", "pod-big-0", "Reserved", reservedNote, at(9), at(9)),
	}
	if err := s.UpsertEvents(ctx, events); err != nil {
		t.Fatal(err)
	}
	got, err := s.ActiveReservations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Reservation{{Scheduler: "schedloop", Job: "ml/big", Pod: "ml/big-0", GPUs: 16, Nodes: []string{"n1", "n2"},
		Start: at(60), Domain: map[string]string{"spine": "s1"}, Since: at(7), Planned: at(9)}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("active reservations (-want +got):\n%s", d)
	}

	// The job starts: its reservation is spent, with no Event.
	if err := s.UpsertPods(ctx, []schedloop.Pod{{UID: "pod-big-0", Namespace: "ml", Name: "big-0", JobUID: "job-big", GPUs: 8,
		Node: "n1", Created: at(0), Scheduled: at(10), Phase: schedloop.PhaseRunning}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ActiveReservations(ctx); err != nil || len(got) != 0 {
		t.Fatalf("after the job started: %+v, %v; want none", got, err)
	}
}

// A released reservation stands no longer, and a note that is not
// schedloop's is skipped, not an error.
func TestActiveReservationsReleasedOrUnreadable(t *testing.T) {
	s := storetest.New(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.UpsertEvents(ctx, []schedloop.Event{
		reservationEvent("a1", "a", "pod-a", "Reserved", reservedNote, t0, t0),
		reservationEvent("a2", "a", "pod-a", "ReservationReleased", "reservation released: reservations are off in the active profile", t0.Add(time.Second), t0.Add(time.Second)),
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ActiveReservations(ctx); err != nil || len(got) != 0 {
		t.Fatalf("released: %+v, %v; want none", got, err)
	}
	e := reservationEvent("b1", "b", "pod-b", "Reserved", "reserved some nodes", t0.Add(time.Minute), t0.Add(time.Minute))
	e.Source = "other-scheduler"
	if err := s.UpsertEvents(ctx, []schedloop.Event{e}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ActiveReservations(ctx); err != nil || len(got) != 0 {
		t.Fatalf("unreadable note: %+v, %v; want none", got, err)
	}
}

// Migration 00014 refiles attempts stored under other whose reservation
// reason covers the most nodes.
func TestMigrationRefilesReservedWaits(t *testing.T) {
	s := storetest.New(t)
	if _, err := s.MigrateDownTo(ctx, 13); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := map[string]map[string]int{
		"held":  {"reserved for ml/big": 3, "Insufficient nvidia.com/gpu": 1},
		"tie":   {"reserved for ml/big": 2, "node(s) were struck by lightning": 2},
		"other": {"reserved for ml/big": 1, "node(s) were struck by lightning": 3},
		"none":  {"node(s) were struck by lightning": 3},
	}
	for key, rs := range rows {
		raw, err := json.Marshal(rs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool().Exec(ctx, `INSERT INTO scheduling_attempts (attempt_key, pod_uid, at, result, category, reasons)
			VALUES ($1, 'p', $2, 'unschedulable', 'other', $3)`, key, at, raw); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"held": "reserved", "tie": "reserved", "other": "other", "none": "other"}
	for key, w := range want {
		var got string
		if err := s.Pool().QueryRow(ctx, `SELECT category FROM scheduling_attempts WHERE attempt_key = $1`, key).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != w {
			t.Errorf("attempt %s: category %s, want %s", key, got, w)
		}
	}
}
