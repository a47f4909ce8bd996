package eta

import (
	"math"
	"testing"
	"time"
)

// batches are finished jobs in blocks of errorBlock, started one a minute
// from two days before the snapshot, each block's jobs running ratios[b]
// times their hour's prediction: a history whose errors persist.
func batches(ratios ...float64) []Observation {
	var obs []Observation
	for _, r := range ratios {
		for i := 0; i < errorBlock; i++ {
			obs = append(obs, Observation{Predicted: time.Hour, Ran: time.Duration(r * float64(time.Hour)), Finished: true})
		}
	}
	for i := range obs {
		obs[i].Began = -48*time.Hour + time.Duration(i)*time.Minute
	}
	return obs
}

// A batch of jobs that started last (three times as many as the block of
// finished jobs before them) and still runs far past its prediction (a sweep of long jobs the predictor took for short ones) is
// what the next jobs are drawn like, though none of it has finished: the
// last jobs to finish are short ones from before, and drawing the next
// from them estimated the waits behind the batch far too short.
func TestErrorModelDrawsLikeTheBatchStillRunning(t *testing.T) {
	obs := batches(0.5, 2, 0.5, 40, 0.5, 2)
	for i := 0; i < 3*errorBlock; i++ {
		obs = append(obs, Observation{Predicted: time.Hour, Ran: 10 * time.Hour, Began: -10 * time.Hour})
	}
	m := NewErrorModel(obs)
	if q := m.Quantile(0.5); q < 10 {
		t.Errorf("median ratio %.2f, want past the 10 the running batch has already reached", q)
	}
	longRun := kaplanMeier(observedOf(obs))
	if q := longRun.quantile(0.5); q > 2 {
		t.Fatalf("long-run median %.2f: the history is not the one the test means", q)
	}
}

// Jobs that have only just started say nothing of their error yet: a
// hundred of them do not pull the recent jobs' ratio of 3 back to the
// long run's.
func TestErrorModelIgnoresJobsThatJustStarted(t *testing.T) {
	obs := batches(0.5, 2, 0.5, 2, 0.5, 3)
	for i := 0; i < 100; i++ {
		obs = append(obs, Observation{Predicted: time.Hour, Ran: time.Minute, Began: -time.Minute})
	}
	m := NewErrorModel(obs)
	if q := m.Quantile(0.5); math.Abs(q-3) > 0.5 {
		t.Errorf("median ratio %.2f, want about the 3 the jobs that started last ran", q)
	}
}

// Errors that do not persist from one block of jobs to the next (every
// block alike) leave the long-run distribution as it is.
func TestErrorModelWithoutPersistenceIsTheLongRun(t *testing.T) {
	var obs []Observation
	cycle := []float64{0.5, 1, 2}
	for i := 0; i < 6*errorBlock; i++ {
		obs = append(obs, Observation{Predicted: time.Hour, Ran: time.Duration(cycle[i%3] * float64(time.Hour)), Finished: true,
			Began: -time.Duration(6*errorBlock-i) * time.Minute})
	}
	m := NewErrorModel(obs)
	longRun := kaplanMeier(observedOf(obs))
	for _, u := range []float64{0.1, 0.5, 0.9} {
		if got, want := m.Quantile(u), longRun.quantile(u); got != want {
			t.Errorf("ratio at %v: %v, want the long run's %v", u, got, want)
		}
	}
}

func observedOf(obs []Observation) []observed {
	out := make([]observed, len(obs))
	for i, o := range obs {
		out[i] = observed{float64(o.Ran) / float64(o.Predicted), o.Finished}
	}
	return out
}

// Batches that started together but finished interleaved with others show
// no spread between blocks in the order they finished; in the order they
// started they do, and the shared factor takes it.
func TestErrorModelSharedSpreadByStart(t *testing.T) {
	obs := batches(0.5, 2, 0.5, 2, 0.5, 2)
	byFinish := make([]Observation, 0, len(obs))
	for i := 0; i < errorBlock; i++ {
		for b := 0; b < 6; b++ {
			byFinish = append(byFinish, obs[b*errorBlock+i])
		}
	}
	m := NewErrorModel(byFinish)
	if want := math.Log(2) - math.Log(0.5); math.Abs(m.shift-want/2) > 1e-9 {
		t.Errorf("shared spread %v, want half the log distance between the batches, %v", m.shift, want/2)
	}
}
