package tuner

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/scoring"
	"github.com/schedloop/schedloop/internal/sim"
)

// TestKueueFrontFromHistory: a job with a Workload waits in the ClusterQueue
// it was admitted to, asking its GPUs of its assigned flavour; one never
// admitted waits in the ClusterQueue its LocalQueue's other Workloads went
// to; a job without a Workload, or whose ClusterQueue is not stored, is
// outside Kueue. The tuner's replays then admit by quota: a team's second
// job waits for its first while the cluster has room.
func TestKueueFrontFromHistory(t *testing.T) {
	cqs := []schedloop.KueueClusterQueue{{Name: "team-a", Quotas: []schedloop.KueueQuota{
		{Flavor: "cpu", Resource: "cpu", Nominal: 64000},
		{Flavor: "h100", Resource: schedloop.GPUResourceName, Nominal: 8000}}}}
	wls := []schedloop.KueueWorkload{
		{Namespace: "ml", Name: "a1", LocalQueue: "lq", ClusterQueue: "team-a", Flavors: map[string]string{schedloop.GPUResourceName: "h100"}},
		{Namespace: "ml", Name: "a2", LocalQueue: "lq"},
		{Namespace: "ml", Name: "lost", LocalQueue: "other"},
	}
	job := func(name string, at time.Duration) sim.Job {
		return sim.Job{Name: "ml/" + name, Arrival: at, Duration: time.Hour, Members: 1, Request: scoring.Request{GPUs: 8}, Util: 1}
	}
	jobs := []sim.Job{job("a1", 0), job("a2", time.Minute), job("lost", time.Minute), job("free", time.Minute)}
	front := KueueFrontFromHistory(cqs, wls, jobs, false)
	fr := scoring.FlavorResource{Flavor: "h100", Resource: schedloop.GPUResourceName}
	if len(front.Jobs) != 2 || front.Jobs["ml/a1"].Queue != "team-a" || front.Jobs["ml/a2"].Queue != "team-a" ||
		front.Jobs["ml/a1"].Req[fr] != 8000 || len(front.Jobs["ml/a1"].Req) != 1 {
		t.Fatalf("front jobs = %+v; want ml/a1 and ml/a2 in team-a asking 8 GPUs of h100", front.Jobs)
	}
	if KueueFrontFromHistory(nil, wls, jobs, false) != nil {
		t.Error("a front without stored ClusterQueues; want none")
	}

	w := Workload{Cluster: &sim.Cluster{Depth: 1}, Jobs: jobs, Kueue: front}
	for i := range 4 {
		w.Cluster.Nodes = append(w.Cluster.Nodes, scoring.NewNode(string(rune('a'+i)), "H100", 8, 64000, 1<<20, "rack-0"))
	}
	cand := Candidate{Params: scoring.DefaultParams()}
	behind, err := NewEvaluator(w, Replays{Count: 1}, sim.Config{}).Evaluate(t.Context(), cand)
	if err != nil {
		t.Fatal(err)
	}
	w.Kueue = nil
	free, err := NewEvaluator(w, Replays{Count: 1}, sim.Config{}).Evaluate(t.Context(), cand)
	if err != nil {
		t.Fatal(err)
	}
	// Behind Kueue a2 starts at 1h, not at 1m: the mean JCT grows by 59m/4.
	if d := behind.PerReplay[0][MetricMeanJCT] - free.PerReplay[0][MetricMeanJCT]; d != (59*time.Minute).Seconds()/4 {
		t.Errorf("mean JCT behind Kueue exceeds the free replay's by %vs, want %vs", d, (59*time.Minute).Seconds()/4)
	}
}

// TestKueueFrontChargesEveryQuotaedResource: a job is charged each resource
// its ClusterQueue sets quota on, in Kueue's thousandths, of the flavour its
// Workload was assigned for that resource, else the queue's first for it. Two jobs that fit team-a's GPU
// quota together but not its CPU quota are admitted one after the other.
func TestKueueFrontChargesEveryQuotaedResource(t *testing.T) {
	cqs := []schedloop.KueueClusterQueue{{Name: "team-a", Quotas: []schedloop.KueueQuota{
		{Flavor: "on-demand", Resource: "cpu", Nominal: 64000},
		{Flavor: "on-demand", Resource: "memory", Nominal: 512 << 30 * 1000},
		{Flavor: "h100", Resource: schedloop.GPUResourceName, Nominal: 16000}}}}
	wls := []schedloop.KueueWorkload{
		{Namespace: "ml", Name: "a1", LocalQueue: "lq", ClusterQueue: "team-a",
			Flavors: map[string]string{"cpu": "on-demand", "memory": "on-demand", schedloop.GPUResourceName: "h100"}},
		{Namespace: "ml", Name: "a2", LocalQueue: "lq"},
	}
	job := func(name string, at time.Duration) sim.Job {
		return sim.Job{Name: "ml/" + name, Arrival: at, Duration: time.Hour, Members: 2,
			Request: scoring.Request{GPUs: 4, CPUMilli: 20000, MemoryMiB: 64 << 10}, Util: 1}
	}
	jobs := []sim.Job{job("a1", 0), job("a2", time.Minute)}
	front := KueueFrontFromHistory(cqs, wls, jobs, false)
	want := map[scoring.FlavorResource]int64{
		{Flavor: "on-demand", Resource: "cpu"}:                40000,
		{Flavor: "on-demand", Resource: "memory"}:             128 << 30 * 1000,
		{Flavor: "h100", Resource: schedloop.GPUResourceName}: 8000,
	}
	for _, name := range []string{"ml/a1", "ml/a2"} {
		if got := front.Jobs[name].Req; !maps.Equal(got, want) {
			t.Errorf("%s asks %v, want %v", name, got, want)
		}
	}

	c := &sim.Cluster{Depth: 1}
	for i := range 4 {
		c.Nodes = append(c.Nodes, scoring.NewNode(string(rune('a'+i)), "H100", 8, 64000, 1<<20, "rack-0"))
	}
	res, err := sim.Run(c, jobs, sim.Config{Params: scoring.DefaultParams(), Kueue: front})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Kueue.Admitted["ml/a2"]; got != time.Hour {
		t.Errorf("a2 admitted at %v, want 1h: 80 cores of team-a's 64-core quota", got)
	}
}

// TestRecommendKueueQuota: team-b's jobs queue behind its 8 GPUs while
// team-a's 24 sit idle and it may not borrow; the proposal moves quota from
// team-a to team-b, its replayed waits fall, and its patch names team-b's
// new nominal quota.
func TestRecommendKueueQuota(t *testing.T) {
	zero := int64(0)
	q := func(name string, gpus int64) schedloop.KueueClusterQueue {
		return schedloop.KueueClusterQueue{Name: name, Cohort: "org", Quotas: []schedloop.KueueQuota{
			{Flavor: "h100", Resource: schedloop.GPUResourceName, Nominal: gpus * 1000, BorrowingLimit: &zero}}}
	}
	cqs := []schedloop.KueueClusterQueue{q("team-a", 24), q("team-b", 8)}
	var wls []schedloop.KueueWorkload
	var jobs []sim.Job
	for i := range 4 {
		name := fmt.Sprintf("b%d", i)
		wls = append(wls, schedloop.KueueWorkload{Namespace: "ml", Name: name, LocalQueue: "b", ClusterQueue: "team-b"})
		jobs = append(jobs, sim.Job{Name: "ml/" + name, Arrival: time.Duration(i) * time.Minute, Duration: time.Hour, Members: 1,
			Request: scoring.Request{GPUs: 8}, Util: 1})
	}
	w := Workload{Cluster: &sim.Cluster{Depth: 1}, Jobs: jobs, Kueue: KueueFrontFromHistory(cqs, wls, jobs, false)}
	for i := range 4 {
		w.Cluster.Nodes = append(w.Cluster.Nodes, scoring.NewNode(string(rune('a'+i)), "H100", 8, 64000, 1<<20, "rack-0"))
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	rec, err := RecommendKueueQuota(context.Background(), w, sim.Config{Params: scoring.DefaultParams()}, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("changes %+v; quota wait %.0fs -> %.0fs, mean wait %.0fs -> %.0fs", rec.Changes, rec.QuotaWaitBeforeS, rec.QuotaWaitAfterS, rec.MeanWaitBeforeS, rec.MeanWaitAfterS)
	if len(rec.Changes) != 2 || rec.QuotaWaitAfterS >= rec.QuotaWaitBeforeS || rec.MeanWaitAfterS >= rec.MeanWaitBeforeS || rec.Jobs != 4 {
		t.Fatalf("recommendation %+v: want quota moved from team-a to team-b, both waits lower", rec)
	}
	for _, ch := range rec.Changes {
		if (ch.ClusterQueue == "team-b") != (ch.To > ch.From) {
			t.Errorf("change %+v: want team-b to gain and team-a to give", ch)
		}
	}
	if !strings.Contains(rec.Patch, "kubectl patch clusterqueue team-b") || !rec.Created.Equal(now) {
		t.Errorf("patch %q created %v: want team-b's patch, created now", rec.Patch, rec.Created)
	}
	if _, err := RecommendKueueQuota(context.Background(), Workload{Jobs: jobs}, sim.Config{}, now); err == nil {
		t.Error("a recommendation without Kueue in front; want an error")
	}
}

// TestRecommendKueueQuotaFallsThrough: team-b's jobs ran on h100, one at a
// time behind its 8 GPUs of it, before team-b had spot quota; its
// ClusterQueue now lists 24 spot GPUs after its h100. Replayed on their
// recorded flavour the jobs still queue for h100 quota; Kueue's flavour
// assigner puts the ones h100 has no room for on spot, so under the current
// quota none waits and no move is proposed.
func TestRecommendKueueQuotaFallsThrough(t *testing.T) {
	zero := int64(0)
	cqs := []schedloop.KueueClusterQueue{
		{Name: "team-a", Cohort: "org", Quotas: []schedloop.KueueQuota{
			{Flavor: "h100", Resource: schedloop.GPUResourceName, Nominal: 24000, BorrowingLimit: &zero},
			{Flavor: "spot", Resource: schedloop.GPUResourceName, BorrowingLimit: &zero}}},
		{Name: "team-b", Cohort: "org", Quotas: []schedloop.KueueQuota{
			{Flavor: "h100", Resource: schedloop.GPUResourceName, Nominal: 8000, BorrowingLimit: &zero},
			{Flavor: "spot", Resource: schedloop.GPUResourceName, Nominal: 24000, BorrowingLimit: &zero}}},
	}
	var wls []schedloop.KueueWorkload
	var jobs []sim.Job
	for i := range 4 {
		name := fmt.Sprintf("b%d", i)
		wls = append(wls, schedloop.KueueWorkload{Namespace: "ml", Name: name, LocalQueue: "b", ClusterQueue: "team-b",
			Flavors: map[string]string{schedloop.GPUResourceName: "h100"}})
		jobs = append(jobs, sim.Job{Name: "ml/" + name, Arrival: time.Duration(i) * time.Minute, Duration: time.Hour, Members: 1,
			Request: scoring.Request{GPUs: 8}, Util: 1})
	}
	w := Workload{Cluster: &sim.Cluster{Depth: 1}, Jobs: jobs, Kueue: KueueFrontFromHistory(cqs, wls, jobs, false)}
	for i := range 4 {
		w.Cluster.Nodes = append(w.Cluster.Nodes, scoring.NewNode(string(rune('a'+i)), "H100", 8, 64000, 1<<20, "rack-0"))
	}
	// The history replay keeps the recorded flavour: the jobs queue on h100.
	res, err := sim.Run(w.Cluster, jobs, sim.Config{Params: scoring.DefaultParams(), Kueue: w.Kueue})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Kueue.Admitted["ml/b1"]; got != time.Hour {
		t.Fatalf("history replay admitted b1 at %v, want 1h behind b0 on team-b's 8 h100 GPUs", got)
	}

	rec, err := RecommendKueueQuota(t.Context(), w, sim.Config{Params: scoring.DefaultParams()}, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Changes) != 0 || rec.QuotaWaitBeforeS != 0 || rec.Patch != "" || rec.Jobs != 4 {
		t.Errorf("recommendation %+v: want no move, no job waiting for quota once spot takes what h100 cannot", rec)
	}
	for name, kj := range w.Kueue.Jobs {
		if kj.Req == nil || kj.Ask != nil {
			t.Errorf("%s: the recommendation changed the workload's front (%+v)", name, kj)
		}
	}
}

// TestAssignable: a job's recorded flavours become its ask per resource,
// summed over flavours; an Ask already given is kept.
func TestAssignable(t *testing.T) {
	front := &sim.KueueFront{FairSharing: true, Jobs: map[string]sim.KueueJob{
		"a": {Queue: "q", Req: map[scoring.FlavorResource]int64{
			{Flavor: "h100", Resource: "cpu"}: 1000, {Flavor: "spot", Resource: "cpu"}: 500,
			{Flavor: "h100", Resource: schedloop.GPUResourceName}: 8000}},
		"b": {Queue: "q", Ask: map[string]int64{"cpu": 2000}},
	}}
	got := Assignable(front)
	want := map[string]sim.KueueJob{
		"a": {Queue: "q", Ask: map[string]int64{"cpu": 1500, schedloop.GPUResourceName: 8000}},
		"b": {Queue: "q", Ask: map[string]int64{"cpu": 2000}},
	}
	if !got.FairSharing || len(got.Jobs) != 2 {
		t.Fatalf("assignable front %+v", got)
	}
	for name, kj := range want {
		if g := got.Jobs[name]; g.Queue != kj.Queue || g.Req != nil || !maps.Equal(g.Ask, kj.Ask) {
			t.Errorf("%s: %+v, want %+v", name, g, kj)
		}
	}
}
