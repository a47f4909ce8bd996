package queue

import "testing"

func TestLedgerCountsGangsAtTheirDeclaredSize(t *testing.T) {
	l := newLedger()
	gangMember := entry{queue: "q", gang: "ns/g", gpus: 8, declared: 32}
	if used, add, _, addGangs := l.extra(gangMember); used != 0 || add != 32 || addGangs != 1 {
		t.Fatalf("first member: used %d add %d gangs %d; want 0, 32 (the whole gang), 1", used, add, addGangs)
	}
	l.add("u1", gangMember)
	if used, add, gangs, addGangs := l.extra(gangMember); used != 32 || add != 0 || gangs != 1 || addGangs != 0 {
		t.Fatalf("second member: used %d add %d gangs %d/%d; want 32, 0, 1, 0", used, add, gangs, addGangs)
	}
	l.add("u1", gangMember) // the informer seeing a reserved pod bound
	l.add("s1", entry{queue: "q", gpus: 2})
	if used, _, _, _ := l.extra(entry{queue: "q", gpus: 1}); used != 34 {
		t.Fatalf("used %d, want 34", used)
	}
	l.remove("u1")
	l.remove("u1")
	if used, _, gangs, _ := l.extra(entry{queue: "q"}); used != 2 || gangs != 0 {
		t.Fatalf("after the gang left: used %d gangs %d; want 2, 0", used, gangs)
	}
}
