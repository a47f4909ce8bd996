// Package apitest fills a store with a small, seeded cluster history — GPU
// samples, pods and gang jobs with their scheduling attempts, tuned profiles —
// written through the store's own methods and rolled up by its own rollups,
// so the API, the dashboard's browser test and the why command are tested
// on the same path the collector takes.
package apitest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/schedloop/schedloop"
	"github.com/schedloop/schedloop/internal/reasons"
	"github.com/schedloop/schedloop/internal/store"
)

// History describes what Fill wrote.
type History struct {
	// From and To are the whole hours the telemetry covers.
	From, To time.Time
	Nodes    []schedloop.Node
	Jobs     []schedloop.Job
	Pods     []schedloop.Pod
	// Gated is a gang member that waited for several reasons; GangJob is its job.
	Gated   schedloop.Pod
	GangJob schedloop.Job
	// Profiles are the stored profile IDs, oldest first.
	Profiles []int64
}

const gpusPerNode = 8

// Fill writes hours of history ending at the last whole hour before end,
// seeded by seed: four 8-GPU nodes in two pairs, each pair running a
// sequence of two-member gangs (one member per node) and lone pods, with
// waits, attempts and per-minute GPU samples, then runs every rollup.
func Fill(ctx context.Context, st *store.Store, seed uint64, end time.Time, hours int) (History, error) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	h := History{To: end.UTC().Truncate(time.Hour)}
	h.From = h.To.Add(-time.Duration(hours) * time.Hour)
	models := []string{"A100", "A100", "H100", "H100"}
	var gpus []schedloop.GPU
	for i, m := range models {
		n := schedloop.Node{Name: fmt.Sprintf("gpu-node-%d", i), GPUModel: m, GPUCount: gpusPerNode, Ready: true,
			Labels: map[string]string{"pool": []string{"a", "b"}[i/2]}}
		h.Nodes = append(h.Nodes, n)
		for g := 0; g < gpusPerNode; g++ {
			gpus = append(gpus, schedloop.GPU{UUID: gpuUUID(i, g), Node: n.Name, Index: g, Model: m})
		}
	}
	if err := st.UpsertNodes(ctx, h.Nodes); err != nil {
		return h, err
	}
	if err := st.UpsertGPUs(ctx, gpus); err != nil {
		return h, err
	}

	// holder[node][minute] is the pod (and its activity) on the node's GPUs.
	type hold struct {
		pod    *schedloop.Pod
		active float64
	}
	minutes := hours * 60
	holder := make([][]hold, len(h.Nodes))
	for i := range holder {
		holder[i] = make([]hold, minutes)
	}
	var attempts []schedloop.SchedulingAttempt
	namespaces := []string{"research", "prod"}
	queues := map[string]string{"research": "research", "prod": "prod"}
	jobN := 0
	for pair := 0; pair < 2; pair++ {
		t := 100 + rng.IntN(60) // first start, minutes after From: every wait starts inside the range
		for t < minutes-90 {
			jobN++
			ns := namespaces[rng.IntN(2)]
			gang := rng.IntN(3) > 0
			run := 60 + rng.IntN(150)
			wait := 10 + rng.IntN(80)
			start := h.From.Add(time.Duration(t) * time.Minute)
			created := start.Add(-time.Duration(wait) * time.Minute)
			end := start.Add(time.Duration(run) * time.Minute)
			if t+run > minutes-30 {
				end = h.From.Add(time.Duration(minutes-30) * time.Minute)
				run = minutes - 30 - t
			}
			members := 1
			kind := schedloop.JobKindPod
			if gang {
				members, kind = 2, schedloop.JobKindGang
			}
			job := schedloop.Job{UID: fmt.Sprintf("job-uid-%03d", jobN), Namespace: ns, Name: fmt.Sprintf("train-%03d", jobN),
				Kind: kind, Queue: queues[ns], MinMember: members, GPUsPerMember: gpusPerNode, Created: created,
				FirstScheduled: start.Add(-time.Minute), Admitted: start, Started: start, Finished: end, Phase: schedloop.PhaseSucceeded}
			h.Jobs = append(h.Jobs, job)
			// An idle holder keeps its GPUs allocated but does nothing.
			active := 0.3 + 0.6*rng.Float64()
			if rng.IntN(4) == 0 {
				active = 0.01
			}
			for m := 0; m < members; m++ {
				node := pair*2 + m
				scheduled := start
				if m == 0 && members > 1 {
					scheduled = start.Add(-time.Minute) // the first member is bound a minute before the gang
				}
				p := schedloop.Pod{UID: fmt.Sprintf("pod-uid-%03d-%d", jobN, m), Namespace: ns, Name: fmt.Sprintf("%s-%d", job.Name, m),
					JobUID: job.UID, Queue: job.Queue, GPUs: gpusPerNode, Node: h.Nodes[node].Name, Created: created,
					Scheduled: scheduled, Started: start, Finished: end, Phase: schedloop.PhaseSucceeded}
				for g := 0; g < gpusPerNode; g++ {
					p.GPUUUIDs = append(p.GPUUUIDs, gpuUUID(node, g))
				}
				h.Pods = append(h.Pods, p)
				pp := &h.Pods[len(h.Pods)-1]
				for x := t; x < t+run; x++ {
					a := active
					if active > 0.1 && (x-t)%7 == 6 {
						a = 0.02 // a data-loading pause every few minutes
					}
					holder[node][x] = hold{pod: pp, active: a}
				}
				attempts = append(attempts, waitAttempts(rng, *pp, job, m == members-1, created, scheduled, len(h.Nodes))...)
			}
			if gang && h.Gated.UID == "" && wait > 30 {
				h.Gated, h.GangJob = h.Pods[len(h.Pods)-1], job
			}
			t += run + rng.IntN(45)
		}
	}
	if h.Gated.UID == "" {
		return h, fmt.Errorf("seed %d made no gang that waited over 30 minutes; pick another seed", seed)
	}

	var samples []schedloop.GPUSample
	for node := range h.Nodes {
		for x := 0; x < minutes; x++ {
			at := h.From.Add(time.Duration(x) * time.Minute)
			for g := 0; g < gpusPerNode; g++ {
				s := schedloop.GPUSample{Time: at, GPUUUID: gpuUUID(node, g), Node: h.Nodes[node].Name, GPUIndex: g}
				if hd := holder[node][x]; hd.pod != nil {
					s.PodNamespace, s.PodName, s.Container = hd.pod.Namespace, hd.pod.Name, "trainer"
					s.GrEngineActive = hd.active
					s.GPUUtil = 100 * hd.active
				}
				samples = append(samples, s)
			}
		}
	}
	if err := st.UpsertJobs(ctx, h.Jobs); err != nil {
		return h, err
	}
	if err := st.UpsertPods(ctx, h.Pods); err != nil {
		return h, err
	}
	if _, err := st.InsertAttempts(ctx, attempts); err != nil {
		return h, err
	}
	if _, err := st.CopyGPUSamples(ctx, samples); err != nil {
		return h, err
	}
	if _, err := st.RollupGPUMinutes(ctx, h.From, h.To); err != nil {
		return h, err
	}
	if err := st.RollupDemand(ctx, h.From, h.To); err != nil {
		return h, err
	}
	if err := st.RollupStates(ctx, h.From, h.To, store.DefaultIdleThreshold); err != nil {
		return h, err
	}
	if err := st.RollupDashboard(ctx, h.From, h.To, store.DefaultIdleThreshold); err != nil {
		return h, err
	}
	ids, err := fillProfiles(ctx, st, h.From)
	h.Profiles = ids
	return h, err
}

func gpuUUID(node, gpu int) string { return fmt.Sprintf("GPU-%02d-%02d", node, gpu) }

// waitAttempts invents what the scheduler said while p waited: first no
// room, then queue or topology trouble, and for a gang's last member the
// gang waiting for it.
func waitAttempts(rng *rand.Rand, p schedloop.Pod, job schedloop.Job, last bool, created, scheduled time.Time, nodes int) []schedloop.SchedulingAttempt {
	var out []schedloop.SchedulingAttempt
	wait := scheduled.Sub(created)
	add := func(frac float64, result schedloop.AttemptResult, cat schedloop.WaitCategory, rs map[string]int, msg string) {
		out = append(out, schedloop.SchedulingAttempt{Key: fmt.Sprintf("%s/%d", p.UID, len(out)), PodUID: p.UID,
			At: created.Add(time.Duration(frac * float64(wait))).Truncate(time.Second), Result: result, Category: cat,
			TotalNodes: nodes, Reasons: rs, Message: msg})
	}
	lacking := 1 + rng.IntN(nodes)
	add(0.1, schedloop.AttemptUnschedulable, schedloop.WaitInsufficientGPU, map[string]int{"Insufficient nvidia.com/gpu": lacking},
		fmt.Sprintf("0/%d nodes are available: %d Insufficient nvidia.com/gpu.", nodes, lacking))
	switch rng.IntN(3) {
	case 0:
		r := reasons.QueueAtLimit(p.Queue, 16)
		add(0.4, schedloop.AttemptUnschedulable, schedloop.WaitQueueLimit, map[string]int{r: nodes}, fmt.Sprintf("0/%d nodes are available: %d %s.", nodes, nodes, r))
	case 1:
		r := reasons.TopologyUnsatisfied(16, "rack", 8)
		add(0.4, schedloop.AttemptUnschedulable, schedloop.WaitTopology, map[string]int{r: nodes}, fmt.Sprintf("0/%d nodes are available: %d %s.", nodes, nodes, r))
	default:
		r := "node(s) had untolerated taint {maintenance: true}"
		add(0.4, schedloop.AttemptUnschedulable, schedloop.WaitTaintAffinity, map[string]int{r: 2, "Insufficient nvidia.com/gpu": nodes - 2},
			fmt.Sprintf("0/%d nodes are available: 2 %s, %d Insufficient nvidia.com/gpu.", nodes, r, nodes-2))
	}
	if job.Kind == schedloop.JobKindGang && last {
		r := reasons.GangIncomplete(job.Namespace, job.Name, 1, job.MinMember)
		add(0.7, schedloop.AttemptWaiting, schedloop.WaitGangIncomplete, map[string]int{r: 1}, r)
	}
	add(1, schedloop.AttemptScheduled, "", nil, "Successfully assigned "+p.Namespace+"/"+p.Name+" to "+p.Node)
	return out
}

func fillProfiles(ctx context.Context, st *store.Store, at time.Time) ([]int64, error) {
	base := map[string]float64{"binpack": 1, "fragmentation": 1, "topology": 1, "load": 0.5}
	ps := []schedloop.Profile{
		{Name: "default", Weights: base, Predicted: map[string]float64{"idle_share": 0.31, "mean_jct_s": 5400},
			Measured: map[string]float64{"idle_share": 0.33, "mean_jct_s": 5620}},
		{Name: "tuned-001", Weights: map[string]float64{"binpack": 2, "fragmentation": 1.5, "topology": 1, "load": 0.5},
			QueueLimits: map[string]schedloop.QueueLimit{"research": {MaxGPUs: 16}},
			Predicted:   map[string]float64{"idle_share": 0.22, "mean_jct_s": 4700},
			Measured:    map[string]float64{"idle_share": 0.29, "mean_jct_s": 5900}},
		{Name: "tuned-002", Weights: map[string]float64{"binpack": 1.5, "fragmentation": 2, "topology": 1.2, "load": 0.25},
			QueueLimits: map[string]schedloop.QueueLimit{"research": {MaxGPUs: 24}, "prod": {MaxGPUs: 16}},
			Predicted:   map[string]float64{"idle_share": 0.24, "mean_jct_s": 4900},
			Measured:    map[string]float64{"idle_share": 0.23, "mean_jct_s": 4810},
			Evidence: map[string]any{"name": "tuned-002", "inputs": map[string]any{"seed": "42", "replays": 5},
				"prediction": map[string]any{"jobs": 120, "spearman": 0.71, "within_2x": 0.64}}},
	}
	var ids []int64
	for i, p := range ps {
		if i > 0 {
			p.ParentID = ids[i-1]
			if i == 2 {
				p.ParentID = ids[0]
			}
		}
		id, err := st.InsertProfile(ctx, p)
		if err != nil {
			return ids, err
		}
		ids = append(ids, id)
	}
	steps := []func() error{
		func() error { return st.ApplyProfile(ctx, ids[0], at) },
		func() error { return st.ApplyProfile(ctx, ids[1], at.Add(2*time.Hour)) },
		func() error {
			return st.SetProfileStatus(ctx, ids[1], schedloop.ProfileRolledBack, "measured JCT 25% worse than predicted")
		},
		func() error { return st.ApplyProfile(ctx, ids[2], at.Add(6*time.Hour)) },
	}
	for _, f := range steps {
		if err := f(); err != nil {
			return ids, err
		}
	}
	return ids, nil
}
