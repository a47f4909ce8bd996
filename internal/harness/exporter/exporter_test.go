package exporter

import (
	"bytes"
	"flag"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

type fixedSource []GPU

func (s fixedSource) GPUs(string) []GPU { return s }

func TestScrapeMatchesGolden(t *testing.T) {
	src := fixedSource{
		{Index: 0, UUID: "GPU-0000", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
			Pod: "train-0", Namespace: "default", Container: "main", Util: 0.9, MemFraction: 0.8},
		{Index: 1, UUID: "GPU-0001", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
			Pod: "notebook-0", Namespace: "research", Container: "main", Util: 0, MemFraction: 0.25},
		{Index: 2, UUID: "GPU-0002", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559},
	}
	e := New("node-a", src)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.now = func() time.Time { return at }
	var first bytes.Buffer
	if err := e.Write(&first); err != nil {
		t.Fatal(err)
	}
	at = at.Add(10 * time.Second) // energy counters advance by power x 10 s
	var got bytes.Buffer
	if err := e.Write(&got); err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/scrape.golden"
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("scrape differs from %s:\n%s", golden, got.String())
	}

	// Prometheus' own parser reads it, and the values follow the holders.
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(got.Bytes()))
	if err != nil {
		t.Fatalf("exposition does not parse: %v", err)
	}
	util := fams["DCGM_FI_DEV_GPU_UTIL"]
	if util == nil || len(util.GetMetric()) != 3 {
		t.Fatalf("DCGM_FI_DEV_GPU_UTIL: %v", util)
	}
	for _, m := range util.GetMetric() {
		var pod string
		for _, l := range m.GetLabel() {
			if l.GetName() == "pod" {
				pod = l.GetValue()
			}
		}
		v := m.GetGauge().GetValue()
		switch {
		case pod == "train-0" && v != 90, pod == "notebook-0" && v != 0, pod == "" && v != 0:
			t.Errorf("pod %q util %v", pod, v)
		}
	}
	if !strings.Contains(got.String(), `DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-0001",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",DCGM_FI_DRIVER_VERSION="`+driverVersion+`",container="main",namespace="research",pod="notebook-0"} 20390`) {
		t.Errorf("idle pod's memory line missing or mislabelled")
	}
}

func TestServeHTTP(t *testing.T) {
	e := New("node-b", fixedSource{{Index: 0, UUID: "GPU-1", Model: "T4", MemoryMiB: 15360}})
	if err := e.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if !strings.HasPrefix(e.URL(), "http://127.0.0.1:") || !strings.HasSuffix(e.URL(), "/metrics") {
		t.Fatalf("URL %q", e.URL())
	}
}

// TestWithCountersPrintsOnlyThoseFamilies: as dcgm-exporter with a counters
// file, the page holds the named families whole and nothing else.
func TestWithCountersPrintsOnlyThoseFamilies(t *testing.T) {
	var page bytes.Buffer
	if err := New("node-a", BusyNode{}).WithCounters("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED").Write(&page); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(&page)
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 2 || len(fams["DCGM_FI_DEV_GPU_UTIL"].GetMetric()) != 8 || len(fams["DCGM_FI_DEV_FB_USED"].GetMetric()) != 8 {
		t.Errorf("page has families %v, want DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED with 8 GPUs each", slices.Sorted(maps.Keys(fams)))
	}
}

// A partitioned GPU's instances are printed as dcgm-exporter prints them:
// under the GPU's UUID and index, told apart by GPU_I_PROFILE and GPU_I_ID
// (placed after Hostname, as in NVIDIA's example output), each with the pod
// that holds it; the collector's parser reads one sample per instance.
func TestMIGInstancesCarryTheirLabels(t *testing.T) {
	src := fixedSource{
		{Index: 0, UUID: "GPU-0000", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Util: 0.45},
		{Index: 0, UUID: "GPU-0000", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 40960, Instance: "1", Profile: "3g.40gb",
			Pod: "small-0", Namespace: "ml", Container: "worker", Util: 0.9, MemFraction: 0.5},
		{Index: 0, UUID: "GPU-0000", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 40960, Instance: "2", Profile: "3g.40gb"},
	}
	var page bytes.Buffer
	if err := New("mig-node", src).WithCounters("DCGM_FI_PROF_GR_ENGINE_ACTIVE").Write(&page); err != nil {
		t.Fatal(err)
	}
	want := `DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-0000",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="mig-node",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",DCGM_FI_DRIVER_VERSION="` +
		driverVersion + `",container="worker",namespace="ml",pod="small-0"} 0.9`
	if !strings.Contains(page.String(), want+"\n") {
		t.Errorf("page lacks the held instance's line\n%s\npage:\n%s", want, page.String())
	}
	if n := strings.Count(page.String(), `GPU_I_ID=`); n != 2 {
		t.Errorf("%d series carry GPU_I_ID, want 2 (the whole GPU carries none):\n%s", n, page.String())
	}
}

// A device a ResourceClaim handed out carries the claim and the device as
// the allocation names them, as dcgm-exporter prints them with DRA on; a
// claimed MIG instance also its profile and MIG- UUID. A device the device
// plugin handed out, and a free one, carry none of them.
func TestDRADevicesCarryTheirClaim(t *testing.T) {
	claim := func(name, device string) *DRADevice {
		return &DRADevice{ClaimName: name, ClaimNamespace: "ml", Driver: "gpu.nvidia.com", Pool: "dra-node", Device: device}
	}
	src := fixedSource{
		{Index: 0, UUID: "GPU-0000", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
			Pod: "train-0", Namespace: "ml", Container: "main", Util: 0.5, DRA: claim("train-0-gpu-x7", "gpu-0")},
		{Index: 1, UUID: "GPU-0001", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 11650, Instance: "3", Profile: "1g.10gb",
			MIGUUID: "MIG-4b1ac2e4-0000-5000-8000-000000000003", Pod: "infer-0", Namespace: "ml", Container: "server", Util: 0.25,
			DRA: claim("infer-0-mig", "gpu-1-mig-1g10gb-3")},
		{Index: 1, UUID: "GPU-0001", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 11650, Instance: "4", Profile: "1g.10gb",
			MIGUUID: "MIG-4b1ac2e4-0000-5000-8000-000000000004"},
		{Index: 2, UUID: "GPU-0002", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559,
			Pod: "plugin-0", Namespace: "ml", Container: "main", Util: 1},
	}
	var page bytes.Buffer
	if err := New("dra-node", src).WithCounters("DCGM_FI_PROF_GR_ENGINE_ACTIVE").Write(&page); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-0000",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dra-node",DCGM_FI_DRIVER_VERSION="` +
			driverVersion + `",container="main",namespace="ml",pod="train-0",dra_claim_name="train-0-gpu-x7",dra_claim_namespace="ml",dra_driver_name="gpu.nvidia.com",dra_pool_name="dra-node",dra_device_name="gpu-0"} 0.5`,
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",UUID="GPU-0001",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="dra-node",GPU_I_PROFILE="1g.10gb",GPU_I_ID="3",DCGM_FI_DRIVER_VERSION="` +
			driverVersion + `",container="server",namespace="ml",pod="infer-0",dra_claim_name="infer-0-mig",dra_claim_namespace="ml",dra_driver_name="gpu.nvidia.com",dra_pool_name="dra-node",dra_device_name="gpu-1-mig-1g10gb-3",dra_mig_profile="1g.10gb",dra_mig_device_uuid="MIG-4b1ac2e4-0000-5000-8000-000000000003"} 0.25`,
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",UUID="GPU-0001",pci_bus_id="00000000:28:00.0",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="dra-node",GPU_I_PROFILE="1g.10gb",GPU_I_ID="4",DCGM_FI_DRIVER_VERSION="` +
			driverVersion + `"} 0`,
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="2",UUID="GPU-0002",pci_bus_id="00000000:38:00.0",device="nvidia2",modelName="NVIDIA H100 80GB HBM3",Hostname="dra-node",DCGM_FI_DRIVER_VERSION="` +
			driverVersion + `",container="main",namespace="ml",pod="plugin-0"} 1`,
	} {
		if !strings.Contains(page.String(), want+"\n") {
			t.Errorf("page lacks\n%s\npage:\n%s", want, page.String())
		}
	}
	if n := strings.Count(page.String(), "dra_claim_name="); n != 2 {
		t.Errorf("%d series name a claim, want the two claimed devices':\n%s", n, page.String())
	}
}
