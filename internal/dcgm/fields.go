package dcgm

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/schedloop/schedloop"
)

// dcgm-exporter's metric names for the fields a GPUSample carries. The
// exporter prints GPU_UTIL as a percentage, the PROF_* fields as 0..1 ratios,
// FB_USED in MiB and POWER_USAGE in watts: the same units as GPUSample, so
// values are copied unchanged.
const (
	MetricGPUUtil        = "DCGM_FI_DEV_GPU_UTIL"
	MetricGrEngineActive = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
	MetricSMActive       = "DCGM_FI_PROF_SM_ACTIVE"
	MetricFBUsed         = "DCGM_FI_DEV_FB_USED"
	MetricPowerUsage     = "DCGM_FI_DEV_POWER_USAGE"
)

// Metrics lists the dcgm-exporter metrics this package reads, in a fixed order.
var Metrics = []string{MetricGPUUtil, MetricGrEngineActive, MetricSMActive, MetricFBUsed, MetricPowerUsage}

// setField stores v in the GPUSample field that metric maps to; it reports
// false for metrics the sample does not carry, which callers skip.
func setField(s *schedloop.GPUSample, metric string, v float64) bool {
	switch metric {
	case MetricGPUUtil:
		s.GPUUtil = v
	case MetricGrEngineActive:
		s.GrEngineActive = v
	case MetricSMActive:
		s.SMActive = v
	case MetricFBUsed:
		s.FBUsedMiB = v
	case MetricPowerUsage:
		s.PowerWatts = v
	default:
		return false
	}
	return true
}

// Labels dcgm-exporter attaches to every series. When Prometheus scrapes the
// exporter through a pod or service monitor, its own pod/namespace/container
// target labels win and the exporter's are renamed with an "exported_" prefix.
const (
	labelGPU         = "gpu"
	labelUUID        = "UUID"
	labelHostname    = "Hostname"
	labelGPUInstance = "GPU_I_ID"
	labelPod         = "pod"
	labelNamespace   = "namespace"
	labelContainer   = "container"
	labelModel       = "modelName"
	exportedPrefix   = "exported_"
)

// labelFunc returns the value of a label, "" when absent.
type labelFunc func(name string) string

// seriesKey identifies one sample: a GPU (or MIG instance) as used by one
// container at one instant. A GPU shared by time-slicing appears once per pod,
// as dcgm-exporter prints it.
type seriesKey struct {
	uuid, gpuInstance, namespace, pod, container string
	unixMilli                                    int64
}

// sampleSet merges the one-metric-per-series shape of the exposition format
// into one GPUSample per seriesKey.
type sampleSet struct {
	// targetLabelsRenamed says the plain pod/namespace/container labels
	// belong to the scrape target (the exporter pod), not to the GPU's user.
	targetLabelsRenamed bool
	index               map[seriesKey]int
	samples             []schedloop.GPUSample
	// models is the modelName label of each GPU UUID, for the inventory.
	models map[string]string
}

func newSampleSet(sizeHint int) *sampleSet {
	return &sampleSet{index: make(map[seriesKey]int, sizeHint), samples: make([]schedloop.GPUSample, 0, sizeHint),
		models: map[string]string{}}
}

// add records metric=v for the series described by label at time t. Metrics
// that GPUSample does not carry are ignored.
func (s *sampleSet) add(metric string, label labelFunc, v float64, t time.Time) error {
	_, err := s.addIndex(metric, label, v, t)
	return err
}

// addIndex is add, also returning the index of the sample that took the
// value (-1 when the metric is not carried).
func (s *sampleSet) addIndex(metric string, label labelFunc, v float64, t time.Time) (int, error) {
	var probe schedloop.GPUSample
	if !setField(&probe, metric, v) {
		return -1, nil
	}
	uuid := label(labelUUID)
	if uuid == "" {
		return -1, fmt.Errorf("metric %s: series without a %s label cannot be joined to a GPU", metric, labelUUID)
	}
	k := seriesKey{uuid: uuid, gpuInstance: label(labelGPUInstance), unixMilli: t.UnixMilli()}
	k.namespace, k.pod, k.container = s.podLabels(label)
	i, ok := s.index[k]
	if !ok {
		idx := -1
		if g := label(labelGPU); g != "" {
			n, err := strconv.Atoi(g)
			if err != nil || n < 0 {
				return -1, fmt.Errorf("metric %s GPU %s: label %s=%q is not a GPU index", metric, uuid, labelGPU, g)
			}
			idx = n
		}
		s.samples = append(s.samples, schedloop.GPUSample{
			Time: t, GPUUUID: uuid, Node: label(labelHostname), GPUIndex: idx,
			PodNamespace: k.namespace, PodName: k.pod, Container: k.container,
		})
		i = len(s.samples) - 1
		s.index[k] = i
		if _, ok := s.models[uuid]; !ok {
			s.models[uuid] = label(labelModel)
		}
	}
	setField(&s.samples[i], metric, v)
	return i, nil
}

func (s *sampleSet) podLabels(label labelFunc) (namespace, pod, container string) {
	namespace, pod, container = label(exportedPrefix+labelNamespace), label(exportedPrefix+labelPod), label(exportedPrefix+labelContainer)
	if s.targetLabelsRenamed || namespace != "" || pod != "" || container != "" {
		return namespace, pod, container
	}
	return label(labelNamespace), label(labelPod), label(labelContainer)
}

// inventory lists the GPUs the samples name, once each, with the model the
// page gave them. MIG instances share their GPU's UUID and index, so a
// partitioned GPU appears once, as the whole device.
func (s *sampleSet) inventory() []schedloop.GPU {
	seen := make(map[string]bool, len(s.models))
	var out []schedloop.GPU
	for i := range s.samples {
		g := &s.samples[i]
		if seen[g.GPUUUID] || g.GPUIndex < 0 || g.Node == "" {
			continue
		}
		seen[g.GPUUUID] = true
		out = append(out, schedloop.GPU{UUID: g.GPUUUID, Node: g.Node, Index: g.GPUIndex, Model: s.models[g.GPUUUID]})
	}
	return out
}

// sorted returns the samples in a stable order (time, node, GPU index, UUID,
// attribution) so that output and golden files do not depend on map order.
func (s *sampleSet) sorted() []schedloop.GPUSample {
	slices.SortFunc(s.samples, compareSamples)
	return s.samples
}

func compareSamples(a, b schedloop.GPUSample) int {
	return cmp.Or(
		a.Time.Compare(b.Time),
		cmp.Compare(a.Node, b.Node),
		cmp.Compare(a.GPUIndex, b.GPUIndex),
		cmp.Compare(a.GPUUUID, b.GPUUUID),
		cmp.Compare(a.PodNamespace, b.PodNamespace),
		cmp.Compare(a.PodName, b.PodName),
		cmp.Compare(a.Container, b.Container),
		// MIG instances of one GPU share its UUID; GPUSample has no instance
		// field, so the values keep their order deterministic.
		cmp.Compare(a.GPUUtil, b.GPUUtil),
		cmp.Compare(a.FBUsedMiB, b.FBUsedMiB),
		cmp.Compare(a.PowerWatts, b.PowerWatts),
		cmp.Compare(a.SMActive, b.SMActive),
		cmp.Compare(a.GrEngineActive, b.GrEngineActive),
	)
}
