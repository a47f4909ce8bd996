package trace

import (
	"fmt"
	"io"
	"strings"
)

// ReadOpenbPods reads an Alibaba GPU trace v2023 ("openb") pod list:
// name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
// creation_time,deletion_time,scheduled_time.
//
// Rules for what the trace does not say directly:
//   - Arrival is creation_time; Duration is deletion_time - scheduled_time, or
//     deletion_time - creation_time for pods the trace never scheduled.
//   - gpu_milli is kept only for one-GPU pods that ask for less than a whole GPU.
//   - Queue is the QoS class in lower case; pods whose phase is Failed fail.
//   - Util is the GPU share the pod asked for (gpu_milli/1000) times DefaultUtil.
//   - Every pod is a job of one member.
//
// A replay needs the times: a list without them (the five-column
// multigpuNN lists) is refused with an error saying so; ReadOpenbShapes
// reads it.
func ReadOpenbPods(r io.Reader) ([]Job, error) {
	return readOpenbPods(r, true)
}

// ReadOpenbShapes reads what each pod of an openb pod list asks for (the
// five columns name,cpu_milli,memory_mib,num_gpu,gpu_milli, and gpu_spec,
// qos and pod_phase when present), for experiments that need no times,
// such as the FGD allocation experiment. Times are read when the list has
// them; without them every Arrival and Duration is 0.
func ReadOpenbShapes(r io.Reader) ([]Job, error) {
	return readOpenbPods(r, false)
}

func readOpenbPods(r io.Reader, needTimes bool) ([]Job, error) {
	t, err := newTable(r, "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
	if err != nil {
		return nil, err
	}
	timed := t.has("creation_time") && t.has("deletion_time")
	if needTimes && !timed {
		return nil, fmt.Errorf("line 1: header lacks column %q (have %s): this pod list records no times, "+
			"so it cannot be replayed over time; the allocation experiment (tuner fgd-table) reads it", "creation_time",
			strings.Join(t.names, ","))
	}
	var jobs []Job
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return jobs, nil
		}
		j, err := openbPod(t, timed)
		if err != nil {
			return nil, err
		}
		// The same bounds as every other reader's jobs (names without
		// control characters, among others).
		if err := j.Validate(); err != nil {
			return nil, fmt.Errorf("line %d: %w", t.line, err)
		}
		jobs = append(jobs, j)
	}
}

func openbPod(t *table, timed bool) (Job, error) {
	j := Job{Name: t.str("name"), Members: 1, Outcome: Succeeded}
	if j.Name == "" {
		return j, t.errf("name", "empty")
	}
	var err error
	if j.CPUMilli, err = t.int64("cpu_milli", 0); err != nil {
		return j, err
	}
	if j.MemoryMiB, err = t.int64("memory_mib", 0); err != nil {
		return j, err
	}
	if j.GPUs, err = t.intField("num_gpu", 0, MaxGPUsPerMember); err != nil {
		return j, err
	}
	milli, err := t.intField("gpu_milli", 0, 1000)
	if err != nil {
		return j, err
	}
	if j.GPUs == 1 && milli > 0 && milli < 1000 {
		j.GPUMilli = milli
	}
	if spec := t.str("gpu_spec"); spec != "" {
		for _, m := range strings.Split(spec, "|") {
			if m = strings.TrimSpace(m); m != "" {
				j.GPUModels = append(j.GPUModels, m)
			}
		}
	}
	j.Queue = strings.ToLower(t.str("qos"))
	if strings.EqualFold(t.str("pod_phase"), "Failed") {
		j.Outcome = Failed
	}
	switch {
	case j.GPUMilli > 0:
		j.Util = DefaultUtil * float64(j.GPUMilli) / 1000
	case j.GPUs > 0:
		j.Util = DefaultUtil
	}
	if !timed {
		return j, nil
	}
	created, err := t.seconds("creation_time", 0)
	if err != nil {
		return j, err
	}
	deleted, err := t.seconds("deletion_time", created)
	if err != nil {
		return j, err
	}
	started, err := t.seconds("scheduled_time", created)
	if err != nil {
		return j, err
	}
	if deleted < started {
		return j, t.errf("deletion_time", "%v is before the pod started at %v", deleted, started)
	}
	j.Arrival = secondsToDuration(created)
	j.Duration = secondsToDuration(deleted - started)
	return j, nil
}

// ReadOpenbNodes reads an openb node list: sn,cpu_milli,memory_mib,gpu,model.
// The model column becomes the node's GPU model; CPU-only rows have gpu 0.
func ReadOpenbNodes(r io.Reader) ([]Node, error) {
	t, err := newTable(r, "sn", "cpu_milli", "memory_mib", "gpu")
	if err != nil {
		return nil, err
	}
	var nodes []Node
	seen := map[string]int{}
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nodes, nil
		}
		n := Node{Name: t.str("sn"), GPUModel: t.str("model")}
		if n.Name == "" {
			return nil, t.errf("sn", "empty")
		}
		if prev, dup := seen[n.Name]; dup {
			return nil, t.errf("sn", "%q repeats line %d", n.Name, prev)
		}
		seen[n.Name] = t.line
		if n.CPUMilli, err = t.int64("cpu_milli", 0); err != nil {
			return nil, err
		}
		if n.MemoryMiB, err = t.int64("memory_mib", 0); err != nil {
			return nil, err
		}
		if n.GPUs, err = t.intField("gpu", 0, 1024); err != nil {
			return nil, err
		}
		if n.GPUs > 0 && n.GPUModel == "" {
			return nil, t.errf("model", "empty for a node with %d GPUs", n.GPUs)
		}
		nodes = append(nodes, n)
	}
}
