package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/api/apitest"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

func TestWhyPrintsTheBreakdownAndTimeline(t *testing.T) {
	url := storetest.URL(t)
	st := storetest.Open(t, url)
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	hist, err := apitest.Fill(context.Background(), st, 7, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), 24)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(context.Background(), []string{"why", hist.Gated.Namespace + "/" + hist.Gated.Name}, env(url), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pod " + hist.Gated.Namespace + "/" + hist.Gated.Name, "waited ", "gang incomplete: 1/2 members",
		"insufficient GPU", "running on " + hist.Gated.Node, "scheduling attempts: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("why output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"why", "-kind", "job", hist.GangJob.Name}, env(url), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "members:") || !strings.Contains(out.String(), "last member") {
		t.Errorf("job why output lacks its members:\n%s", out.String())
	}
	if err := run(context.Background(), []string{"why", "nobody"}, env(url), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "no pod or job matches") {
		t.Errorf("why nobody: err = %v", err)
	}
}

// seedETA stores one 8-GPU node, a job running on it for the last 20
// minutes and an 8-GPU job waiting for it (ml/run, ml/wait).
func seedETA(t *testing.T, url string) {
	t.Helper()
	st := storetest.Open(t, url)
	ctx := context.Background()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	start := now.Add(-20 * time.Minute)
	if err := st.UpsertNodes(ctx, []schedloop.Node{{Name: "n1", GPUModel: "H100", GPUCount: 8, Ready: true, FirstSeen: start, LastSeen: now}}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertJobs(ctx, []schedloop.Job{
		{UID: "run", Namespace: "ml", Name: "run", Kind: schedloop.JobKindPod, MinMember: 1, GPUsPerMember: 8, Created: start, Admitted: start, Started: start, FirstScheduled: start, Phase: schedloop.PhaseRunning},
		{UID: "wait", Namespace: "ml", Name: "wait", Kind: schedloop.JobKindPod, MinMember: 1, GPUsPerMember: 8, Created: now.Add(-time.Minute), Phase: schedloop.PhasePending},
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertPods(ctx, []schedloop.Pod{
		{UID: "p-run", Namespace: "ml", Name: "run", JobUID: "run", GPUs: 8, Node: "n1", Created: start, Scheduled: start, Started: start, Phase: schedloop.PhaseRunning},
		{UID: "p-wait", Namespace: "ml", Name: "wait", JobUID: "wait", GPUs: 8, Created: now.Add(-time.Minute), Phase: schedloop.PhasePending},
	}); err != nil {
		t.Fatal(err)
	}
}

func TestWhyETA(t *testing.T) {
	url := storetest.URL(t)
	seedETA(t, url)
	ctx := context.Background()
	var out strings.Builder
	if err := run(ctx, []string{"why", "-eta", "ml/wait"}, env(url), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Expected start: in ") || !strings.Contains(out.String(), "on n1; waits for ml/run") {
		t.Errorf("why -eta of a waiting pod lacks its expected start on n1 after ml/run:\n%s", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"why", "-eta", "ml/run"}, env(url), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Expected start: none; the job is not waiting") {
		t.Errorf("why -eta of a running pod:\n%s", out.String())
	}
}
