package storetest

import (
	"fmt"
	"time"

	"github.com/schedloop/schedloop"
)

// Samples generates n deterministic GPU samples: gpus devices across nodes
// of 8, one scrape every step starting at start, every GPU held by a pod
// whose activity depends on its index so rollups have something to average.
func Samples(n, gpus int, start time.Time, step time.Duration) []schedloop.GPUSample {
	out := make([]schedloop.GPUSample, n)
	for i := range out {
		g := i % gpus
		scrape := i / gpus
		util := float64((g*7+scrape)%101) / 100
		out[i] = schedloop.GPUSample{
			Time:           start.Add(time.Duration(scrape) * step),
			GPUUUID:        fmt.Sprintf("GPU-%08d", g),
			Node:           fmt.Sprintf("node-%04d", g/8),
			GPUIndex:       g % 8,
			PodNamespace:   "ml",
			PodName:        fmt.Sprintf("job-%d-0", g/8),
			Container:      "trainer",
			GPUUtil:        util * 100,
			GrEngineActive: util,
			SMActive:       util * 0.8,
			FBUsedMiB:      float64(1024 * (g%8 + 1)),
			PowerWatts:     100 + 300*util,
		}
	}
	return out
}
