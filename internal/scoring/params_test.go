package scoring

import (
	"strings"
	"testing"
	"time"
)

func TestParamsValidateNamesTheField(t *testing.T) {
	ok := DefaultParams()
	tests := []struct {
		name string
		edit func(*Params)
		want string // "" for valid
	}{
		{"default", func(*Params) {}, ""},
		{"every policy field set", func(p *Params) {
			p.Order, p.StarvationBound, p.Reservation, p.ReservationThreshold, p.PreemptMinRunTime =
				OrderShortestService, time.Hour, true, 10*time.Minute, 5*time.Minute
		}, ""},
		{"negative GPU limit", func(p *Params) { p.Queues = map[string]QueueLimit{"a": {MaxGPUs: -1}} }, "queues.a.maxGPUs: -1 is negative"},
		{"negative gang limit", func(p *Params) { p.Queues = map[string]QueueLimit{"a": {MaxRunningGangs: -2}} }, "queues.a.maxRunningGangs: -2 is negative"},
		{"empty queue name", func(p *Params) { p.Queues = map[string]QueueLimit{"": {MaxGPUs: 1}} }, "queues: an empty queue name"},
		{"negative gang timeout", func(p *Params) { p.GangTimeout = -time.Second }, "gangTimeoutSeconds: -1 is outside 0..86400"},
		{"gang timeout over a day", func(p *Params) { p.GangTimeout = 25 * time.Hour }, "gangTimeoutSeconds: 90000 is outside 0..86400"},
		{"fractional gang timeout", func(p *Params) { p.GangTimeout = 1500 * time.Millisecond }, "gangTimeoutSeconds: 1.5s is not a whole number of seconds"},
		{"unknown order", func(p *Params) { p.Order = "lifo" }, `order: "lifo" is not a known policy (known: arrival, shortest-service, fair-share)`},
		{"negative starvation bound", func(p *Params) { p.StarvationBound = -time.Minute }, "starvationBoundSeconds: -60 is outside"},
		{"threshold without reservation", func(p *Params) { p.ReservationThreshold = time.Minute }, "reservation.thresholdSeconds: 60 is set but reservation is off"},
		{"negative minimum run time", func(p *Params) { p.PreemptMinRunTime = -time.Second }, "preemption.minRunTimeSeconds: -1 is outside"},
		{"unknown term", func(p *Params) { p.Weights = Weights{"gravity": 1} }, "weights.gravity: unknown score term"},
	}
	for _, tc := range tests {
		p := ok.Clone()
		tc.edit(&p)
		err := p.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestParamsZeroValuesMeanTheDefaults(t *testing.T) {
	var p Params
	if got := p.EffectiveGangTimeout(); got != DefaultGangTimeout || DefaultGangTimeout != time.Minute {
		t.Errorf("zero gang timeout means %v, want the 60 s default", got)
	}
	if got := p.EffectiveOrder(); got != OrderArrival {
		t.Errorf("empty order means %q, want %q", got, OrderArrival)
	}
	p.Queues = map[string]QueueLimit{"": {MaxGPUs: 1}, "a": {MaxGPUs: 2}}
	if p.Limit("") != (QueueLimit{}) || p.Limit("b") != (QueueLimit{}) || p.Limit("a").MaxGPUs != 2 {
		t.Errorf("Limit: pods without a queue and unlisted queues must be unlimited")
	}
}

func TestQueueCheck(t *testing.T) {
	quarter := int64(250)
	tests := []struct {
		name    string
		limit   QueueLimit
		used    QueueUsage
		demand  int64
		newGang bool
		want    QueueVerdict
	}{
		{"zero limit is no limit", QueueLimit{}, QueueUsage{GPUMilli: 1 << 40, RunningGangs: 1 << 20}, 8000, true, QueueAdmitted},
		{"sixteen quarter GPUs fill a 4-GPU limit", QueueLimit{MaxGPUs: 4}, QueueUsage{GPUMilli: 15 * quarter}, quarter, false, QueueAdmitted},
		{"the seventeenth does not fit", QueueLimit{MaxGPUs: 4}, QueueUsage{GPUMilli: 16 * quarter}, quarter, false, QueueAtGPULimit},
		{"a gang over the GPU limit", QueueLimit{MaxGPUs: 8, MaxRunningGangs: 1}, QueueUsage{}, 9000, true, QueueAtGPULimit},
		{"one gang too many", QueueLimit{MaxGPUs: 8, MaxRunningGangs: 1}, QueueUsage{GPUMilli: 1000, RunningGangs: 1}, 1000, true, QueueAtGangLimit},
		{"the gang limit does not count lone pods", QueueLimit{MaxRunningGangs: 1}, QueueUsage{RunningGangs: 1}, 1000, false, QueueAdmitted},
		{"nothing more asked in a queue over a lowered limit", QueueLimit{MaxGPUs: 1}, QueueUsage{GPUMilli: 4000}, 0, false, QueueAdmitted},
	}
	for _, tc := range tests {
		if got := QueueCheck(tc.limit, tc.used, tc.demand, tc.newGang); got != tc.want {
			t.Errorf("%s: QueueCheck = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestNodeDomainsStopAtTheFirstMissingLabel(t *testing.T) {
	levels := []string{"spine", "rack", "nvlink"}
	tests := []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"spine": "s1", "rack": "r1", "nvlink": "n1"}, "s1/r1/n1"},
		{map[string]string{"spine": "s1", "nvlink": "n1"}, "s1"},
		{map[string]string{"spine": "s1", "rack": "", "nvlink": "n1"}, "s1"},
		{map[string]string{"rack": "r1"}, ""},
		{nil, ""},
	}
	for _, tc := range tests {
		got := strings.Join(NodeDomains(levels, func(k string) string { return tc.labels[k] }), "/")
		if got != tc.want {
			t.Errorf("NodeDomains(%v) = %q, want %q", tc.labels, got, tc.want)
		}
	}
}

// A node without topology labels is a host of its own and belongs to no
// domain above it: a gang that fits one such host is planned there, and
// two unlabelled nodes never form a shared "" domain.
func TestPlanGangOnUnlabelledNodes(t *testing.T) {
	a := NewNode("a", "H100", 8, 64000, 1<<20)
	b := NewNode("b", "H100", 8, 64000, 1<<20)
	whole := Request{GPUs: 4}
	plan, ok := PlanGang([]*Node{a, b}, whole, 2, 2, -1)
	if !ok || plan.Level != 2 || strings.Join(plan.Path, "/") != "a" || !plan.Contains(a) || plan.Contains(b) {
		t.Errorf("two members on one unlabelled host: plan %+v, %v", plan, ok)
	}
	// Two 8-GPU members need both hosts: no domain holds them, so the
	// plan is the whole cluster rather than a "" rack of unlabelled nodes.
	plan, ok = PlanGang([]*Node{a, b}, Request{GPUs: 8}, 2, 2, -1)
	if !ok || plan.Level != -1 {
		t.Errorf("a gang over two unlabelled hosts: plan %+v, %v; want the cluster level", plan, ok)
	}
	if _, ok := PlanGang([]*Node{a, b}, Request{GPUs: 8}, 2, 2, 0); ok {
		t.Errorf("a required rack must not be met by unlabelled nodes")
	}
	labelled := NewNode("c", "H100", 8, 64000, 1<<20, "s1", "r1")
	if got := LargestDomainGPUs([]*Node{a, b, labelled}, 0, 2); got != 8 {
		t.Errorf("largest spine = %d GPUs, want 8 (only the labelled node has a spine)", got)
	}
	if got := LargestDomainGPUs([]*Node{a, b, labelled}, 2, 2); got != 8 {
		t.Errorf("largest host = %d GPUs, want 8", got)
	}
}
