package api_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// /gpus puts a partitioned GPU's MIG instances under it, with their shares.
func TestGPUsListsInstancesUnderTheirGPU(t *testing.T) {
	st := storetest.New(t)
	const model = "NVIDIA A100-SXM4-80GB"
	if err := st.RecordGPUs(ctx, []schedloop.GPU{
		{UUID: "GPU-a", Node: "n1", Index: 0, Model: model},
		{UUID: "GPU-b", Node: "n1", Index: 1, Model: model, MIGProfile: "3g.40gb", Instance: "1"},
		{UUID: "GPU-b", Node: "n1", Index: 1, Model: model, MIGProfile: "4g.40gb", Instance: "2"},
		{UUID: "GPU-c", Node: "n2", Index: 0, Model: model},
	}); err != nil {
		t.Fatal(err)
	}
	h := api.NewRouter(st, api.Options{Now: func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }})
	type instance struct {
		ID           string  `json:"id"`
		Profile      string  `json:"profile"`
		ComputeShare float64 `json:"compute_share"`
	}
	type gpu struct {
		UUID      string     `json:"uuid"`
		Node      string     `json:"node"`
		Index     int        `json:"index"`
		Instances []instance `json:"instances"`
	}
	var got struct {
		GPUs      []gpu `json:"gpus"`
		Truncated bool  `json:"truncated"`
	}
	if code := get(t, h, "/api/v1/gpus?node=n1", nil, &got); code != 200 {
		t.Fatalf("gpus: %d", code)
	}
	want := []gpu{
		{UUID: "GPU-a", Node: "n1", Index: 0, Instances: []instance{}},
		{UUID: "GPU-b", Node: "n1", Index: 1, Instances: []instance{{"1", "3g.40gb", 3.0 / 7}, {"2", "4g.40gb", 4.0 / 7}}},
	}
	if diff := cmp.Diff(want, got.GPUs); diff != "" || got.Truncated {
		t.Errorf("GET /gpus?node=n1 (-want +got):\n%s truncated=%v", diff, got.Truncated)
	}
	if code := get(t, h, "/api/v1/gpus?limit=1", nil, &got); code != 200 || len(got.GPUs) != 1 || !got.Truncated {
		t.Errorf("GET /gpus?limit=1: %d, %d GPUs, truncated=%v; want one GPU, truncated", code, len(got.GPUs), got.Truncated)
	}
}
