package podspec

import (
	"encoding/json"
	"flag"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var update = flag.Bool("update", false, "rewrite the golden files from the current output")

func res(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func podOf(name string, containers, inits []corev1.ResourceList) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	for _, r := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Resources: corev1.ResourceRequirements{Requests: r, Limits: r}})
	}
	for _, r := range inits {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Resources: corev1.ResourceRequirements{Requests: r, Limits: r}})
	}
	return p
}

// readCases are the pods whose facts testdata/read.golden holds.
func readCases() []*corev1.Pod {
	one := func(kv ...string) []corev1.ResourceList { return []corev1.ResourceList{res(kv...)} }
	gang := podOf("gang-member", one("nvidia.com/gpu", "8", "cpu", "16"), nil)
	gang.Labels = map[string]string{LabelPodGroup: "train", LabelQueue: "research"}
	gang.Annotations = map[string]string{AnnotationKueueTopologyRequired: "topology.schedloop.io/rack"}
	gang.Spec.Priority = ptr.To[int32](1000)
	both := podOf("both-topology-annotations", nil, nil)
	both.Annotations = map[string]string{AnnotationKueueTopologyRequired: "kueue-level", AnnotationTopologyRequired: "schedloop-level"}
	workload := podOf("workload-member", one("nvidia.com/gpu", "8"), nil)
	workload.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("train-wl")}
	workload.Labels = map[string]string{LabelQueue: "research"}
	twoGangs := podOf("gang-declared-both-ways", one("nvidia.com/gpu", "1"), nil)
	twoGangs.Labels = map[string]string{LabelPodGroup: "crd-gang"}
	twoGangs.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("workload-gang")}
	model := podOf("model", one("nvidia.com/gpu", "1"), nil)
	model.Spec.NodeSelector = map[string]string{LabelGPUProduct: "NVIDIA-H100"}
	migA30 := podOf("mig-on-a30", one("nvidia.com/mig-1g.6gb", "1"), nil)
	migA30.Spec.NodeSelector = map[string]string{LabelGPUProduct: "NVIDIA-A30"}
	migTooLarge := podOf("mig-larger-than-an-a30", one("nvidia.com/mig-7g.80gb", "1", "nvidia.com/mig-1g.6gb", "1"), nil)
	migTooLarge.Spec.NodeSelector = map[string]string{LabelGPUProduct: "NVIDIA-A30"}
	return []*corev1.Pod{
		podOf("empty", nil, nil),
		podOf("whole", one("nvidia.com/gpu", "2", "cpu", "4", "memory", "16Gi"), nil),
		podOf("two-containers", []corev1.ResourceList{res("nvidia.com/gpu", "1"), res("nvidia.com/gpu", "2")}, nil),
		podOf("init-asks-more", one("nvidia.com/gpu", "1", "cpu", "1"), one("nvidia.com/gpu", "4", "cpu", "500m")),
		podOf("share", one("schedloop.io/gpu-milli", "250"), nil),
		podOf("share-in-init", one("cpu", "1"), one("schedloop.io/gpu-milli", "300")),
		podOf("share-of-a-whole-gpu", one("schedloop.io/gpu-milli", "1000"), nil),
		podOf("share-above-one-gpu", one("schedloop.io/gpu-milli", "1500"), nil),
		podOf("fractional-share", one("schedloop.io/gpu-milli", "250500m"), nil),
		podOf("share-beside-whole", one("schedloop.io/gpu-milli", "250", "nvidia.com/gpu", "1"), nil),
		podOf("mig", one("nvidia.com/mig-1g.10gb", "2", "nvidia.com/mig-3g.40gb", "1"), nil),
		podOf("mig-beside-whole", one("nvidia.com/mig-1g.10gb", "1", "nvidia.com/gpu", "1"), nil),
		podOf("mig-unreadable-profile", one("nvidia.com/mig-big", "1"), nil),
		gang, both, model, migA30, migTooLarge, workload, twoGangs,
	}
}

type readResult struct {
	Pod   string `json:"pod"`
	Facts Facts  `json:"facts"`
	Error string `json:"error,omitempty"`
}

func TestReadGolden(t *testing.T) {
	var got []readResult
	for _, pod := range readCases() {
		f, err := Read(pod)
		r := readResult{Pod: pod.Name, Facts: f}
		if err != nil {
			r.Error = err.Error()
		}
		if err := f.Request.Validate(); err != nil {
			t.Errorf("%s: Read gave a request no node can serve: %v", pod.Name, err)
		}
		got = append(got, r)
	}
	out, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/read.golden.json"
	if *update {
		if err := os.WriteFile(golden, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(append(out, '\n')) != string(want) {
		t.Errorf("Read:\n got: %s\nwant: %s", out, want)
	}
}

func TestResourcesReadBack(t *testing.T) {
	for _, pod := range readCases() {
		f, err := Read(pod)
		if err != nil {
			continue
		}
		r := f.Request
		back := Request(podOf("back", []corev1.ResourceList{Resources(r)}, nil))
		back.GPUModels = r.GPUModels
		if back.GPUs != r.GPUs || back.GPUMilli != r.GPUMilli || back.CPUMilli != r.CPUMilli || back.MemoryMiB != r.MemoryMiB {
			t.Errorf("%s: Resources(%+v) reads back as %+v", pod.Name, r, back)
		}
	}
}

// FuzzRead: whatever quantities a pod carries, Read never panics and never
// returns a request that no node could serve.
func FuzzRead(f *testing.F) {
	f.Add("250", "0", "1", "0,3", "1g.10gb")
	f.Add("1000", "1", "2", "x", "7g.80gb")
	f.Add("250500m", "8", "0", "", "1c.2g.20gb+me")
	f.Add("-5", "1Ki", "3", "1,1", "0g.5gb")
	f.Fuzz(func(t *testing.T, milli, gpus, initGPUs, devices, migProfile string) {
		list := corev1.ResourceList{}
		if q, err := resource.ParseQuantity(gpus); err == nil {
			list[corev1.ResourceName(ResourceMIGPrefix+migProfile)] = q
		}
		for name, s := range map[corev1.ResourceName]string{ResourceGPUMilli: milli, ResourceGPU: gpus} {
			if q, err := resource.ParseQuantity(s); err == nil {
				list[name] = q
			}
		}
		var inits []corev1.ResourceList
		if q, err := resource.ParseQuantity(initGPUs); err == nil {
			inits = append(inits, corev1.ResourceList{ResourceGPU: q})
		}
		pod := podOf("fuzz", []corev1.ResourceList{list}, inits)
		pod.Annotations = map[string]string{AnnotationGPUDevices: devices}
		facts, err := Read(pod)
		r := facts.Request
		if r.GPUs >= 0 && r.Validate() != nil {
			t.Errorf("Read(%q, %q, %q) = %+v: %v", milli, gpus, initGPUs, r, r.Validate())
		}
		if err == nil && r.GPUMilli != 0 && !r.Shared() {
			t.Errorf("share %d read without error but is not a share", r.GPUMilli)
		}
		if r.MIGMilli() < 0 || (len(r.MIG) > 0) != (r.MIGMilli() > 0 && r.MIG[migProfile] > 0) {
			t.Errorf("MIG %v read, counting %d milli-GPU", r.MIG, r.MIGMilli())
		}
		if d, ok := Devices(pod); ok {
			for _, i := range d {
				if i < 0 {
					t.Errorf("Devices(%q) = %v", devices, d)
				}
			}
		}
	})
}
