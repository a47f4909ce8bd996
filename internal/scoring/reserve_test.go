package scoring

import (
	"testing"
	"time"
)

func TestBackfillAdmits(t *testing.T) {
	for _, tc := range []struct {
		name       string
		held       bool
		end, start int64
		want       bool
	}{
		{"outside the reservation, ending long after", false, 1000, 10, true},
		{"reserved, ending before the start", true, 9, 10, true},
		{"reserved, ending at the start", true, 10, 10, true},
		{"reserved, ending after the start", true, 11, 10, false},
	} {
		if got := BackfillAdmits(tc.held, tc.end, tc.start); got != tc.want {
			t.Errorf("%s: BackfillAdmits(%v, %d, %d) = %v, want %v", tc.name, tc.held, tc.end, tc.start, got, tc.want)
		}
	}
	// Reservation.Admits is the same rule over node indices.
	r := Reservation{Start: 10, Nodes: []int{1, 3}}
	for i := range 5 {
		held := i == 1 || i == 3
		for _, end := range []int64{5, 10, 11} {
			if r.Admits(i, end) != BackfillAdmits(held, end, r.Start) {
				t.Errorf("node %d end %d: Admits disagrees with BackfillAdmits", i, end)
			}
		}
	}
}

func TestReservationBinds(t *testing.T) {
	p := Params{Reservation: true}
	holder := QueueKey{Created: 10, Name: "big"}
	if !ReservationBinds(p, 100, holder, QueueKey{Created: 20, Name: "later"}) {
		t.Error("a job after the holder is held to its reservation")
	}
	if ReservationBinds(p, 100, holder, QueueKey{Created: 5, Name: "earlier"}) {
		t.Error("a job ahead of the holder is not held to it")
	}
	if ReservationBinds(p, 100, holder, QueueKey{Priority: 1, Created: 20, Name: "urgent"}) {
		t.Error("a job of higher priority is ahead of the holder")
	}
	// Under shortest-service the order, not arrival, decides.
	sp := Params{Reservation: true, Order: OrderShortestService}
	if ReservationBinds(sp, 100, QueueKey{Created: 10, Service: 500}, QueueKey{Created: 20, Service: 5}) {
		t.Error("shortest-service: a shorter later job is ahead of the holder")
	}
}

func TestTakesReservation(t *testing.T) {
	p := Params{Reservation: true, ReservationThreshold: time.Minute}
	min := int64(time.Minute)
	job := QueueKey{Created: 0, Name: "a"}
	if TakesReservation(p, min-1, 0, job, nil) {
		t.Error("before its threshold a job takes no reservation")
	}
	if !TakesReservation(p, min, 0, job, nil) {
		t.Error("with none held, a job past its threshold takes it")
	}
	ahead := QueueKey{Created: -5, Name: "b"}
	if TakesReservation(p, min, 0, job, &ahead) {
		t.Error("a job after the holder does not take its reservation")
	}
	behind := QueueKey{Created: 5, Name: "c"}
	if !TakesReservation(p, min, 0, job, &behind) {
		t.Error("a job ahead of the holder takes the reservation over")
	}
	if TakesReservation(Params{}, min, 0, job, nil) {
		t.Error("reservations off: none is taken")
	}
}

func TestPlanReservationFitsNow(t *testing.T) {
	// The job fits on n1 as things stand: it is expected now, there, even
	// though n0's job ends later.
	nodes := []*Node{NewNode("n0", "", 8, 0, 0), NewNode("n1", "", 8, 0, 0)}
	a, _ := nodes[0].Allocate(Request{GPUs: 8}, nodes[0].IdleDevices(8))
	running := []Ending{{Nodes: []int{0}, Allocs: []Allocation{a}, End: 100}}
	whole := Request{GPUs: 8}
	res, ok := PlanReservation(nodes, running, 10, func(trial []*Node) []int {
		return PlaceTrialJob(trial, whole, 1, 0, -1, Scorer{Weights: Weights{TermBinPack: 1}})
	})
	if !ok || res.Start != 10 || len(res.Nodes) != 1 || res.Nodes[0] != 1 {
		t.Fatalf("reservation %+v ok=%v, want n1 from now (10)", res, ok)
	}
}
