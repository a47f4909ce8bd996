package sim

import (
	"math/rand"
	"slices"
	"strings"

	"github.com/schedloop/schedloop/internal/scoring"
)

// The static experiment of "Beware of Fragmentation" (Weng et al., USENIX
// ATC 2023): pods arrive one by one into an empty cluster in a seeded random
// order and never leave; a pod that fits nowhere fails and the stream goes
// on. Each policy is judged by the share of GPUs allocated as the arrived
// demand grows.

// InflateFGD builds the paper's arrival stream from a trace's pods: sort by
// name, shuffle with Go's math/rand seeded by seed (the artifact's legacy
// generator), then append pods sampled with replacement from the shuffled
// list until the total GPU request reaches ratio times capacityMilli. As in
// the artifact, the stop test compares the sampled pod's per-device share
// while the running total adds its whole request, and the first sample that
// would overshoot ends the stream.
func InflateFGD(pods []Job, capacityMilli int64, ratio float64, seed int64) []Job {
	out := slices.Clone(pods)
	slices.SortStableFunc(out, func(a, b Job) int { return strings.Compare(a.Name, b.Name) })
	rng := rand.New(rand.NewSource(seed))
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	var total int64
	for _, p := range out {
		total += p.deviceMilli()
	}
	target := int64(ratio * float64(capacityMilli))
	n := len(out)
	for i := 0; total < target; i++ {
		p := out[rng.Intn(n)]
		perDevice := int64(0)
		switch {
		case p.Request.Shared():
			perDevice = int64(p.Request.GPUMilli)
		case p.Request.GPUs > 0:
			perDevice = scoring.MilliPerGPU
		}
		if total+perDevice > target {
			break
		}
		p.Name += "-tuned-" + itoa(i)
		out = append(out, p)
		total += p.deviceMilli()
	}
	return out
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	k := len(b)
	for ; i > 0; i /= 10 {
		k--
		b[k] = byte('0' + i%10)
	}
	return string(b[k:])
}

// FillPoint is the cluster after one more pod arrived.
type FillPoint struct {
	// Arrived is the GPU request of every pod so far, Allocated that of the
	// pods placed, Fragmentation the expected fragmented capacity; all in
	// percent of the cluster's GPUs.
	Arrived, Allocated, Fragmentation float64
	Placed                            bool
}

// Fill places pods in order under policy on a copy of c; pods never leave.
// workload is the typical pod mix (for FGD scoring and the fragmentation
// measure); seed drives PolicyRandom.
func Fill(c *Cluster, pods []Job, policy scoring.Policy, workload scoring.Workload, seed uint64) []FillPoint {
	cl := c.Clone()
	s := scoring.Scorer{Weights: policy.Weights(), Workload: workload}
	p := newPlacer(cl, s, policy == scoring.PolicyRandom, seed, -1, 100) // the paper's simulator scores every node
	capacity := float64(cl.GPUMilli())
	out := make([]FillPoint, len(pods))
	var arrived, allocated int64
	for i, pod := range pods {
		arrived += pod.deviceMilli()
		ok := false
		if pod.Members == 1 {
			_, _, ok = p.placeOne(pod.Request, p.shape(shapeKey(pod.Request)), uint64(i))
		} else {
			_, _, ok = p.placeGang(pod.Request, pod.Members, uint64(i))
		}
		if ok {
			allocated += pod.deviceMilli()
		}
		out[i] = FillPoint{Arrived: float64(arrived) / capacity * 100, Allocated: float64(allocated) / capacity * 100,
			Fragmentation: p.fragSum / capacity * 100, Placed: ok}
	}
	return out
}

// At returns the first point whose arrived demand reaches pct percent (the
// last point when none does).
func At(points []FillPoint, pct float64) FillPoint {
	for _, p := range points {
		if p.Arrived >= pct {
			return p
		}
	}
	if len(points) == 0 {
		return FillPoint{}
	}
	return points[len(points)-1]
}
