package profilewatch

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics live in the scheduler's legacy registry, so they appear on its
// /metrics next to kube-scheduler's own.
var (
	reloads = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "schedloop", Subsystem: "scheduler", Name: "profile_reloads_total",
		Help:           "Profile ConfigMap versions the scheduler loaded (result=success) or refused (result=failure).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	activeInfo = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "schedloop", Subsystem: "scheduler", Name: "profile_active_info",
		Help:           "The active scheduling profile: 1 for its name (the profile version) and content hash.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"name", "hash"})
	generation = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "schedloop", Subsystem: "scheduler", Name: "profile_generation",
		Help:           "Successful profile swaps since the scheduler started.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(reloads, activeInfo, generation)
	})
}

func publish(a *Active) {
	activeInfo.Reset()
	activeInfo.WithLabelValues(a.Doc.Name, a.Hash).Set(1)
	generation.Set(float64(a.Generation))
}
