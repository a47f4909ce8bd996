package scoring

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCompareOrder(t *testing.T) {
	h := int64(time.Hour)
	keys := []QueueKey{
		{Name: "long-early", Created: 0, Service: 100},
		{Name: "short-late", Created: 2 * h, Service: 10},
		{Name: "mid", Created: 1 * h, Service: 50},
		{Name: "urgent", Created: 3 * h, Service: 1000, Priority: 5},
	}
	names := func(p Params, now int64) string {
		ks := slices.Clone(keys)
		slices.SortStableFunc(ks, func(a, b QueueKey) int { return CompareOrder(p, now, a, b) })
		var out []string
		for _, k := range ks {
			out = append(out, k.Name)
		}
		return strings.Join(out, ",")
	}
	tests := []struct {
		name string
		p    Params
		now  int64
		want string
	}{
		{"arrival", Params{}, 4 * h, "urgent,long-early,mid,short-late"},
		{"shortest service first", Params{Order: OrderShortestService}, 4 * h, "urgent,short-late,mid,long-early"},
		// long-early has waited 4h, past the 3h bound: it goes first among
		// its priority, the others keep the policy's order.
		{"starvation bound lifts the old job", Params{Order: OrderShortestService, StarvationBound: 3 * time.Hour}, 4 * h,
			"urgent,long-early,short-late,mid"},
		// Both long-early (4h) and mid (3h) are past a 2h bound: oldest first.
		{"starved jobs by arrival", Params{Order: OrderShortestService, StarvationBound: 150 * time.Minute}, 4 * h,
			"urgent,long-early,mid,short-late"},
		{"bound not yet reached", Params{Order: OrderShortestService, StarvationBound: 5 * time.Hour}, 4 * h,
			"urgent,short-late,mid,long-early"},
	}
	for _, tc := range tests {
		if got := names(tc.p, tc.now); got != tc.want {
			t.Errorf("%s: order %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestLeastAttainedOrdersByQueueUsage(t *testing.T) {
	p := Params{Order: OrderFairShare}
	heavy := QueueKey{Name: "a", Created: 0, Attained: 1e6}
	light := QueueKey{Name: "b", Created: 10, Attained: 10}
	if CompareOrder(p, 100, light, heavy) >= 0 {
		t.Error("the queue with less attained service should go first")
	}
	if CompareOrder(Params{}, 100, light, heavy) <= 0 {
		t.Error("arrival order ignores attained service")
	}
}

func TestAttainedServiceDecays(t *testing.T) {
	hl := time.Hour
	var a AttainedService
	a.Advance(0, hl, 8) // 8 GPUs start running
	s := int64(time.Second)
	// After one half-life of 8 GPUs: 8 × (1 - 1/2) / (ln2 / 3600 s).
	want := 8 * 0.5 / (math.Ln2 / 3600)
	if got := a.Attained(3600*s, hl); math.Abs(got-want) > 1e-6*want {
		t.Errorf("attained after one half-life = %v, want %v", got, want)
	}
	a.Advance(3600*s, hl, -8) // they stop
	if got := a.Attained(7200*s, hl); math.Abs(got-want/2) > 1e-6*want {
		t.Errorf("attained a half-life after stopping = %v, want %v", got, want/2)
	}
}

func TestWantsReservation(t *testing.T) {
	p := Params{Reservation: true, ReservationThreshold: time.Minute}
	if p.WantsReservation(0, int64(59*time.Second)) || !p.WantsReservation(0, int64(time.Minute)) {
		t.Error("a head job gets a reservation once it has waited the threshold")
	}
	if (Params{}).WantsReservation(0, int64(time.Hour)) {
		t.Error("reservations off: none")
	}
}

func TestPlanReservation(t *testing.T) {
	// Two 8-GPU nodes: a runs on n0 until 100, b on n1 until 50. A job
	// needing a whole node is reserved n1 from 50.
	nodes := []*Node{NewNode("n0", "", 8, 0, 0), NewNode("n1", "", 8, 0, 0)}
	whole := Request{GPUs: 8}
	aA, _ := nodes[0].Allocate(Request{GPUs: 4}, nodes[0].IdleDevices(4))
	aB, _ := nodes[1].Allocate(Request{GPUs: 2}, nodes[1].IdleDevices(2))
	running := []Ending{{Nodes: []int{0}, Allocs: []Allocation{aA}, End: 100}, {Nodes: []int{1}, Allocs: []Allocation{aB}, End: 50}}
	place := func(trial []*Node) []int {
		if i := slices.IndexFunc(trial, func(n *Node) bool { return n.Fit(whole) == Fits }); i >= 0 {
			return []int{i}
		}
		return nil
	}
	res, ok := PlanReservation(nodes, running, 10, place)
	if !ok || res.Start != 50 || !slices.Equal(res.Nodes, []int{1}) {
		t.Fatalf("reservation %+v ok=%v, want n1 from 50", res, ok)
	}
	if nodes[1].IdleGPUs() != 6 {
		t.Error("planning changed the nodes")
	}
	if !res.Admits(0, 1000) {
		t.Error("a node outside the reservation is open to any job")
	}
	if !res.Admits(1, 50) || res.Admits(1, 51) {
		t.Error("a reserved node is open only to jobs predicted to end by its start")
	}
	// An overrunning job (predicted end already past) is expected now.
	running[1].End = 5
	if res, _ := PlanReservation(nodes, running, 10, place); res.Start != 10 {
		t.Errorf("overrun: start %d, want now (10)", res.Start)
	}
	// Too large for the cluster: no reservation.
	if _, ok := PlanReservation(nodes, running, 10, func([]*Node) []int { return nil }); ok {
		t.Error("a job that never fits got a reservation")
	}
}

// Jobs stopped at one instant arrive anew just after it, behind a job that
// arrived at it, in the order they first arrived, whatever their kind.
func TestRequeue(t *testing.T) {
	keys := []QueueKey{{Name: "lone", Created: 20}, {Name: "gang", Gang: "gang", Created: 10}}
	Requeue(100, len(keys), func(i int) *QueueKey { return &keys[i] })
	if keys[1].Created != 101 || keys[0].Created != 102 {
		t.Errorf("requeued at %d (gang) and %d (lone), want 101 and 102", keys[1].Created, keys[0].Created)
	}
	arrived := QueueKey{Name: "arrived", Created: 100}
	if CompareQueueKeys(arrived, keys[1]) >= 0 || CompareQueueKeys(keys[1], keys[0]) >= 0 {
		t.Error("want the job arrived at 100 first, then the gang, then the lone pod")
	}
}
