package sim

import (
	"reflect"
	"testing"
	"time"

	"github.com/schedloop/schedloop/internal/scoring"
)

func predicted(j Job, s int) Job { j.Predicted = sec(s); return j }

// The order and reservation rules as a replay applies them: each case is
// the smallest workload where the rule changes who starts when.
func TestOrderAndReservation(t *testing.T) {
	bin := scoring.Weights{scoring.TermBinPack: 1}
	sps := scoring.Params{Weights: bin, Order: scoring.OrderShortestService}
	reserve := scoring.Params{Weights: bin, Reservation: true}
	// Two 8-GPU nodes and a 4-GPU one.
	mixed := cluster(3, 8)
	mixed.Nodes[2] = scoring.NewNode("c", "A100", 4, 64000, 1<<20, "rack-0")
	tests := []struct {
		name   string
		c      *Cluster
		jobs   []Job
		cfg    Config
		starts []time.Duration
	}{
		// a holds the node; long arrives before short, both wait.
		{"arrival order", cluster(1, 8),
			[]Job{job("a", 0, 100, 1, 8), predicted(job("long", 1, 500, 1, 8), 500), predicted(job("short", 2, 10, 1, 8), 10)},
			Config{Params: scoring.Params{Weights: bin}}, []time.Duration{0, sec(100), sec(600)}},
		{"shortest predicted service first", cluster(1, 8),
			[]Job{job("a", 0, 100, 1, 8), predicted(job("long", 1, 500, 1, 8), 500), predicted(job("short", 2, 10, 1, 8), 10)},
			Config{Params: sps}, []time.Duration{0, sec(110), sec(100)}},
		// Service is run time × GPUs: 4 GPUs for 30 s (120) after 8 for 10 s (80).
		{"service counts GPUs", cluster(1, 8),
			[]Job{job("a", 0, 100, 1, 8), predicted(job("wide", 1, 30, 1, 4), 30), predicted(job("narrow", 2, 10, 1, 8), 10)},
			Config{Params: sps}, []time.Duration{0, sec(110), sec(100)}},
		// long has waited 99 s by 100 s, past the 50 s bound: it goes first.
		{"starvation bound lifts the old job", cluster(1, 8),
			[]Job{job("a", 0, 100, 1, 8), predicted(job("long", 1, 500, 1, 8), 500), predicted(job("short", 2, 10, 1, 8), 10)},
			Config{Params: scoring.Params{Weights: bin, Order: scoring.OrderShortestService, StarvationBound: sec(50)}},
			[]time.Duration{0, sec(100), sec(600)}},
		// small fits beside a but arrives after big, which does not fit.
		{"no backfill stops at the first job that does not fit", cluster(1, 8),
			[]Job{job("a", 0, 100, 1, 4), job("big", 1, 10, 1, 8), job("small", 2, 10, 1, 4)},
			Config{Params: scoring.Params{Weights: bin}, NoBackfill: true}, []time.Duration{0, sec(100), sec(110)}},
		{"without reservations a later job passes", cluster(1, 8),
			[]Job{job("a", 0, 100, 1, 4), job("big", 1, 10, 1, 8), job("small", 2, 500, 1, 4)},
			Config{Params: scoring.Params{Weights: bin}}, []time.Duration{0, sec(502), sec(2)}},
		// big is reserved the node from 100 (a's predicted end); small
		// would end at 502, after that, so it waits for big.
		{"a reservation holds the node against a long job", cluster(1, 8),
			[]Job{predicted(job("a", 0, 100, 1, 4), 100), predicted(job("big", 1, 10, 1, 8), 10), predicted(job("small", 2, 500, 1, 4), 500)},
			Config{Params: reserve}, []time.Duration{0, sec(100), sec(110)}},
		// tiny ends at 52, before the reservation starts: it backfills.
		{"a job predicted to end before the reservation backfills", cluster(1, 8),
			[]Job{predicted(job("a", 0, 100, 1, 4), 100), predicted(job("big", 1, 10, 1, 8), 10), predicted(job("tiny", 2, 50, 1, 4), 50)},
			Config{Params: reserve}, []time.Duration{0, sec(100), sec(2)}},
		// big is reserved a's node from 100; small runs long on b's node,
		// which the reservation leaves open.
		{"unreserved nodes stay open", cluster(2, 8),
			[]Job{predicted(job("a", 0, 100, 1, 8), 100), predicted(job("b", 0, 200, 1, 4), 200),
				predicted(job("big", 1, 10, 1, 8), 10), predicted(job("small", 2, 500, 1, 4), 500)},
			Config{Params: reserve}, []time.Duration{0, 0, sec(100), sec(2)}},
		// A gang is reserved both nodes from 300; small ends by then and
		// backfills, long would not and waits behind the gang.
		{"a gang's reservation", cluster(2, 8),
			[]Job{predicted(job("a", 0, 100, 1, 8), 100), predicted(job("b", 0, 300, 1, 8), 300),
				predicted(job("gang", 1, 10, 2, 8), 10), predicted(job("small", 100, 50, 1, 8), 50), predicted(job("long", 160, 500, 1, 8), 500)},
			Config{Params: reserve},
			[]time.Duration{0, 0, sec(300), sec(100), sec(310)}},
		// big is reserved a and b from 100. g, predicted past then, may
		// use c alone, where one member of two fits: no gang holds GPUs
		// part-placed (scoring.GangBacksOff), so c stays free and l, also
		// predicted past 100, starts there at once instead of waiting for
		// g's members to time out. g starts when big ends.
		{"a gang that cannot be placed whole holds nothing", mixed,
			[]Job{predicted(job("x", 0, 100, 1, 8), 100), predicted(job("big", 1, 10, 2, 8), 10),
				predicted(job("g", 2, 50, 2, 4), 500), predicted(job("l", 3, 10, 1, 4), 500)},
			Config{Params: reserve}, []time.Duration{0, sec(100), sec(110), sec(3)}},
		// The threshold: big has waited 1 s when small arrives, under the
		// 60 s threshold, so it has no reservation yet and small passes.
		{"before the threshold no reservation", cluster(1, 8),
			[]Job{predicted(job("a", 0, 100, 1, 4), 100), predicted(job("big", 1, 10, 1, 8), 10), predicted(job("small", 2, 500, 1, 4), 500)},
			Config{Params: scoring.Params{Weights: bin, Reservation: true, ReservationThreshold: sec(60)}}, []time.Duration{0, sec(502), sec(2)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkStarts(t, tc.c, tc.jobs, tc.cfg, tc.starts) })
	}
}

// A predictor hears each finished job and predicts from it.
type lastRun struct {
	seen      []string
	predicted map[string]time.Duration
	last      time.Duration
}

func (l *lastRun) Predict(j *Job, _ time.Duration) time.Duration {
	l.predicted[j.Name] = l.last
	return l.last
}
func (l *lastRun) Observe(j *Job, ran, _ time.Duration) {
	l.seen = append(l.seen, j.Name)
	l.last = ran
}

func TestPredictorLearnsOnlyFromFinishedJobs(t *testing.T) {
	p := &lastRun{predicted: map[string]time.Duration{}}
	_, err := Run(cluster(1, 8), []Job{job("a", 0, 100, 1, 8), job("b", 50, 30, 1, 8), job("c", 200, 10, 1, 8)},
		Config{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}, Predictor: p})
	if err != nil {
		t.Fatal(err)
	}
	// b arrives while a runs: nothing finished, so nothing is known.
	want := map[string]time.Duration{"a": 0, "b": 0, "c": sec(30)}
	if !reflect.DeepEqual(p.predicted, want) || !reflect.DeepEqual(p.seen, []string{"a", "b", "c"}) {
		t.Errorf("predicted %v after %v, want %v", p.predicted, p.seen, want)
	}
}

func TestReplayRefusesBadOrder(t *testing.T) {
	for _, cfg := range []Config{
		{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}, Order: "random-ish"}},
		{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}, StarvationBound: -time.Second}},
		{Params: scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}, ReservationThreshold: time.Minute}},
	} {
		if _, err := Run(cluster(1, 8), []Job{job("a", 0, 1, 1, 1)}, cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

func TestPreemptionSparesProtectedJobs(t *testing.T) {
	bin := scoring.Params{Weights: scoring.Weights{scoring.TermBinPack: 1}}
	high := prio(job("high", 10, 10, 1, 8), 100)
	// Evicted at 10, low reruns from 20 to 120.
	checkStarts(t, cluster(1, 8), []Job{job("low", 0, 100, 1, 8), high}, Config{Params: bin, Preemption: true}, []time.Duration{sec(20), sec(10)})
	inference := job("low", 0, 100, 1, 8)
	inference.NonPreemptible = true
	checkStarts(t, cluster(1, 8), []Job{inference, high}, Config{Params: bin, Preemption: true}, []time.Duration{0, sec(100)})
	young := bin
	young.PreemptMinRunTime = sec(30) // low has run 10 s when high arrives
	checkStarts(t, cluster(1, 8), []Job{job("low", 0, 100, 1, 8), high}, Config{Params: young, Preemption: true}, []time.Duration{0, sec(100)})
	// A gang is evicted whole: both members, and both rerun.
	res := checkStarts(t, cluster(2, 8), []Job{job("gang", 0, 100, 2, 8), high}, Config{Params: bin, Preemption: true},
		[]time.Duration{sec(20), sec(10)})
	if res.Jobs[0].Preemptions != 1 || res.Metrics.Preemptions != 1 {
		t.Errorf("gang: %+v, want one preemption of the whole gang", res.Jobs[0])
	}
}
