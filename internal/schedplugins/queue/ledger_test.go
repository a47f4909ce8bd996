package queue

import (
	"testing"

	"github.com/schedloop/schedloop/internal/scoring"
)

func TestLedgerCountsGangsAtTheirDeclaredSize(t *testing.T) {
	l := newLedger()
	gangMember := entry{queue: "q", gang: "ns/g", milli: 8000, declared: 32000}
	if used, demand, newGang := l.extra(gangMember); used != (scoring.QueueUsage{}) || demand != 32000 || !newGang {
		t.Fatalf("first member: used %+v demand %d new gang %v; want nothing, 32000 (the whole gang), true", used, demand, newGang)
	}
	l.add("u1", gangMember)
	if used, demand, newGang := l.extra(gangMember); used != (scoring.QueueUsage{GPUMilli: 32000, RunningGangs: 1}) || demand != 0 || newGang {
		t.Fatalf("second member: used %+v demand %d new gang %v; want 32000 in 1 gang, 0, false", used, demand, newGang)
	}
	l.add("u1", gangMember) // the informer seeing a reserved pod bound
	l.add("s1", entry{queue: "q", milli: 2000})
	l.add("s2", entry{queue: "q", milli: 250})
	if used, _, _ := l.extra(entry{queue: "q", milli: 1000}); used.GPUMilli != 34250 {
		t.Fatalf("used %d milli-GPU, want 34250", used.GPUMilli)
	}
	l.remove("u1")
	l.remove("u1")
	if used, _, _ := l.extra(entry{queue: "q"}); used != (scoring.QueueUsage{GPUMilli: 2250}) {
		t.Fatalf("after the gang left: used %+v; want 2250 milli-GPU, no gangs", used)
	}
}
