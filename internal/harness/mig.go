package harness

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/harness/exporter"
	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/trace"
)

// A node's MIG resources (trace.Node.MIG, the device plugin's mixed
// strategy) are served by partitioned GPUs of its model beside its whole
// ones, as under that strategy nvidia.com/gpu counts only unpartitioned
// GPUs. Instances are packed first fit, largest profile first, onto as few
// partitioned GPUs as hold them; each GPU numbers its instances from 1, the
// GPU_I_ID dcgm-exporter prints.

// migInstance is one MIG instance and the pod holding it.
type migInstance struct {
	part    int // index into machine.partUUID
	id      string
	profile string
	slices  int
	holder  string // pod key, "" when free
}

// partitionMIG lays out spec's MIG instances and names their GPUs.
func partitionMIG(spec trace.Node) (instances []migInstance, partUUID []string, err error) {
	model := modelName(spec.GPUModel)
	total := schedloop.MIGSlices(model)
	for _, name := range slices.Sorted(maps.Keys(spec.MIG)) {
		profile, ok := strings.CutPrefix(name, podspec.ResourceMIGPrefix)
		if !ok {
			return nil, nil, fmt.Errorf("node %s: field mig: resource %q is not a MIG resource (%s<profile>)", spec.Name, name, podspec.ResourceMIGPrefix)
		}
		share, err := schedloop.MIGComputeShare(model, profile)
		if err != nil {
			return nil, nil, fmt.Errorf("node %s: field mig[%s]: %w", spec.Name, name, err)
		}
		for range spec.MIG[name] {
			instances = append(instances, migInstance{profile: profile, slices: int(math.Round(share * float64(total)))})
		}
	}
	slices.SortStableFunc(instances, func(a, b migInstance) int { return cmp.Compare(b.slices, a.slices) })
	var free []int // slices left on each partitioned GPU
	var next []int // the next GPU_I_ID on each
	for i := range instances {
		in := &instances[i]
		p := slices.IndexFunc(free, func(f int) bool { return f >= in.slices })
		if p < 0 {
			free, next = append(free, total), append(next, 1)
			p = len(free) - 1
		}
		free[p] -= in.slices
		in.part, in.id = p, strconv.Itoa(next[p])
		next[p]++
	}
	for p := range free {
		index := spec.GPUs + p
		partUUID = append(partUUID, "GPU-"+uuid.NewSHA1(uuid.NameSpaceOID, []byte(spec.Name+"/"+strconv.Itoa(index))).String())
	}
	return instances, partUUID, nil
}

// migUUID is the MIG- UUID of instance in of the GPU parent, derived from
// both so that the exporter's view and the DRA driver's slices agree.
func migUUID(parent string, in migInstance) string {
	return "MIG-" + uuid.NewSHA1(uuid.NameSpaceOID, []byte(parent+"/"+in.id)).String()
}

// takeMIG gives the pod key the free instances pod asks for, lowest GPU and
// id first, or takes none and says which profile ran short.
func (m *machine) takeMIG(key string, pod *corev1.Pod) ([]int, error) {
	facts, _ := podspec.Read(pod)
	var took []int
	for _, profile := range slices.Sorted(maps.Keys(facts.MIG)) {
		want := facts.MIG[profile]
		for i := range m.mig {
			if want == 0 {
				break
			}
			if in := &m.mig[i]; in.profile == profile && in.holder == "" {
				in.holder = key
				took = append(took, i)
				want--
			}
		}
		if want > 0 {
			m.releaseMIG(took)
			return nil, fmt.Errorf("%d %s%s instances short", want, podspec.ResourceMIGPrefix, profile)
		}
	}
	return took, nil
}

func (m *machine) releaseMIG(held []int) {
	for _, i := range held {
		m.mig[i].holder = ""
	}
}

// migGPUs is what the node's exporter shows of its partitioned GPUs: each
// whole GPU (busy by the compute-weighted activity of its instances, as the
// GPU entity reads under MIG) followed by its instances and their holders.
func (n *Nodes) migGPUs(m *machine) []exporter.GPU {
	model := modelName(m.spec.GPUModel)
	total := float64(schedloop.MIGSlices(model))
	mem := gpuMemory(m.spec)
	var out []exporter.GPU
	for p, id := range m.partUUID {
		whole := exporter.GPU{Index: m.spec.GPUs + p, UUID: id, Model: model, MemoryMiB: mem}
		var instances []exporter.GPU
		for _, in := range m.mig {
			if in.part != p {
				continue
			}
			share := float64(in.slices) / total
			g := exporter.GPU{Index: whole.Index, UUID: id, Model: model, MemoryMiB: int64(float64(mem) * share),
				Instance: in.id, Profile: in.profile, MIGUUID: migUUID(id, in)}
			if r := n.runs[in.holder]; r != nil {
				ns, name, _ := cache.SplitMetaNamespaceKey(in.holder)
				g.Pod, g.Namespace, g.Container = name, ns, r.container
				g.DRA = draDevice(r, in.holder, m.spec.Name, migDeviceName(whole.Index, in))
				g.Util, g.MemFraction = r.util, r.mem
				whole.Util += r.util * share
				whole.MemFraction += r.mem * share
			}
			instances = append(instances, g)
		}
		out = append(out, whole)
		out = append(out, instances...)
	}
	return out
}
