package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

func post(t *testing.T, h http.Handler, path, body string, out any) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("POST %s: %d %q is not JSON: %v", path, rec.Code, rec.Body.String(), err)
		}
	}
	return rec.Code
}

type etaAnswer struct {
	Running int
	Jobs    []struct {
		UID, Name, State, Reason string
		WaitP50                  *float64 `json:"wait_p50_seconds"`
		Nodes                    []string
	}
}

// One 8-GPU node, a job running on it for 20 of its predicted 60 minutes
// (the default prediction, with no history), and one waiting.
func TestETAAndWhatIf(t *testing.T) {
	st := storetest.New(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if err := st.UpsertNodes(ctx, []schedloop.Node{{Name: "n1", GPUModel: "H100", GPUCount: 8, CPUMilli: 64000, MemoryMiB: 512000, Ready: true, FirstSeen: now, LastSeen: now}}); err != nil {
		t.Fatal(err)
	}
	start := now.Add(-20 * time.Minute)
	jobs := []schedloop.Job{
		{UID: "run", Namespace: "ml", Name: "run", Kind: schedloop.JobKindPod, MinMember: 1, GPUsPerMember: 8, Created: start, Admitted: start, Started: start, FirstScheduled: start, Phase: schedloop.PhaseRunning},
		{UID: "wait", Namespace: "ml", Name: "wait", Kind: schedloop.JobKindPod, MinMember: 1, GPUsPerMember: 8, Created: now.Add(-time.Minute), Phase: schedloop.PhasePending},
	}
	if err := st.UpsertJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertPods(ctx, []schedloop.Pod{{UID: "p-run", Namespace: "ml", Name: "run", JobUID: "run", GPUs: 8, Node: "n1", Created: start, Scheduled: start, Started: start, Phase: schedloop.PhaseRunning}}); err != nil {
		t.Fatal(err)
	}
	h := api.NewRouter(st, api.Options{Now: func() time.Time { return now }})
	var all etaAnswer
	if code := get(t, h, "/api/v1/eta", nil, &all); code != 200 {
		t.Fatalf("eta: %d", code)
	}
	if all.Running != 1 || len(all.Jobs) != 1 || all.Jobs[0].UID != "wait" || all.Jobs[0].State != "starts" || all.Jobs[0].WaitP50 == nil {
		t.Fatalf("eta: %+v, want the waiting job's start", all)
	}
	if w := *all.Jobs[0].WaitP50; w <= 0 {
		t.Errorf("wait p50 %v s: the node is full until the running job ends", w)
	}
	var one struct{ Job struct{ UID string } }
	if code := get(t, h, "/api/v1/eta/jobs/wait", nil, &one); code != 200 || one.Job.UID != "wait" {
		t.Errorf("eta/jobs/wait: %d %+v", code, one)
	}
	if code := get(t, h, "/api/v1/eta/jobs/run", nil, nil); code != 404 {
		t.Errorf("eta of a running job: %d, want 404", code)
	}

	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: big, namespace: ml}\nspec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: 16}}}]}\n"
	var never etaAnswer
	if code := post(t, h, "/api/v1/whatif", pod, &never); code != 200 {
		t.Fatalf("whatif: %d", code)
	}
	if len(never.Jobs) != 1 || never.Jobs[0].State != "never-fits" || !strings.Contains(never.Jobs[0].Reason, "16 GPUs") {
		t.Errorf("whatif of a 16-GPU pod on an 8-GPU node: %+v, want never-fits saying why", never)
	}
	for _, bad := range []struct{ path, body, field string }{
		{"/api/v1/whatif", "{{{", "parameter body"},
		{"/api/v1/whatif", "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: a, resources: {limits: {example.com/fpga: 1}}}]}", "example.com/fpga"},
		{"/api/v1/whatif", "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: 1}}}], nodeSelector: {nvidia.com/gpu.product: B200}}", "GPU models"},
		{"/api/v1/whatif?drain=n9", "", "node \\\"n9\\\" is not stored"},
		{"/api/v1/whatif?queue_limit=team", "", "parameter queue_limit"},
		{"/api/v1/whatif", "", "nothing to ask"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, bad.path, strings.NewReader(bad.body)))
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), bad.field) {
			t.Errorf("POST %s %q: %d %s, want 400 naming %s", bad.path, bad.body, rec.Code, rec.Body.String(), bad.field)
		}
	}
	if code := post(t, h, "/api/v1/whatif?queue_limit=:8", "", nil); code != 400 {
		t.Errorf("an unnamed queue: %d, want 400", code)
	}
	// Nothing was written.
	open, err := st.OpenJobs(ctx, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 2 {
		t.Errorf("%d open jobs after what-ifs, want the 2 stored", len(open))
	}
}
