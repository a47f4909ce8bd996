package dcgm

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	labelGPUProfile  = "GPU_I_PROFILE"
	labelPod         = "pod"
	labelNamespace   = "namespace"
	labelContainer   = "container"
	labelModel       = "modelName"
	exportedPrefix   = "exported_"
)

// Labels dcgm-exporter adds, with KUBERNETES_ENABLE_DRA, to the series of
// a MIG instance a ResourceClaim holds (NVIDIA/dcgm-exporter,
// internal/pkg/transformation: the DRA branch of the pod mapper in
// kubernetes.go, the ResourceSlice reading in dra.go): its profile and its
// own MIG- UUID, from the attributes "profile" and "uuid" NVIDIA's DRA
// driver publishes. Every claimed device's series also carries the claim
// and the device as the allocation names it (dra_claim_name,
// dra_claim_namespace, dra_driver_name, dra_pool_name, dra_device_name),
// which the pod labels beside them already say enough of. An instance's
// series are its GPU instance entity's (GPU_I_ID, GPU_I_PROFILE), under the
// parent GPU's UUID.
const (
	labelDRAMIGProfile    = "dra_mig_profile"
	labelDRAMIGDeviceUUID = "dra_mig_device_uuid"
)

// migUUIDPrefix starts every MIG instance UUID NVML prints, old form
// (MIG-GPU-<uuid>/<gi>/<ci>) and new (MIG-<uuid>) alike.
const migUUIDPrefix = "MIG-"

// labelFunc returns the value of a label, "" when absent.
type labelFunc func(name string) string

// seriesKey identifies one sample: a GPU (or MIG instance) as used by one
// container at one instant. A GPU shared by time-slicing appears once per pod,
// as dcgm-exporter prints it.
type seriesKey struct {
	uuid, gpuInstance, namespace, pod, container string
	unixMilli                                    int64
}

// seriesLabels is what a sample needs of a series' labels, looked up once
// per label set rather than once per series.
type seriesLabels struct {
	uuid, gpuInstance, gpu, hostname, model string
	// profile is the MIG instance's GPU_I_PROFILE and share its part of the
	// GPU's compute, 0 for a whole GPU; shareErr says why a profile has none.
	profile                        string
	share                          float64
	shareErr                       error
	migUUID                        string
	namespace, pod, container      string
	exportedNamespace, exportedPod string
	exportedContainer              string
}

func resolveLabels(label labelFunc) seriesLabels {
	l := seriesLabels{
		uuid: label(labelUUID), gpuInstance: label(labelGPUInstance), gpu: label(labelGPU),
		hostname: label(labelHostname), model: label(labelModel),
		namespace: label(labelNamespace), pod: label(labelPod), container: label(labelContainer),
		exportedNamespace: label(exportedPrefix + labelNamespace), exportedPod: label(exportedPrefix + labelPod),
		exportedContainer: label(exportedPrefix + labelContainer),
	}
	l.resolveInstance(label)
	return l
}

// resolveInstance reads the MIG instance a series names, if any: its
// profile, share and DRA MIG UUID.
func (l *seriesLabels) resolveInstance(label labelFunc) {
	l.profile, l.migUUID, l.shareErr = draInstance(l.gpuInstance, label(labelGPUProfile), label(labelDRAMIGProfile), label(labelDRAMIGDeviceUUID))
	if l.shareErr == nil {
		l.share, l.shareErr = instanceShare(l.gpuInstance, l.profile, l.model)
	}
}

// draInstance reconciles the instance labels of DCGM (GPU_I_PROFILE) and of
// the DRA claim (dra_mig_profile, dra_mig_device_uuid). The claim's profile
// stands in for a missing GPU_I_PROFILE; two that differ describe two
// instances, and the page is refused. A DRA MIG UUID belongs on an
// instance's series only: on a whole GPU's (no GPU_I_ID) it would hand the
// GPU, every instance together, to one instance's pod.
func draInstance(instance, profile, draProfile, migUUID string) (string, string, error) {
	switch {
	case draProfile != "" && profile != "" && draProfile != profile:
		return "", "", fmt.Errorf("label %s=%q but %s=%q", labelGPUProfile, profile, labelDRAMIGProfile, draProfile)
	case profile == "":
		profile = draProfile
	}
	switch {
	case migUUID == "":
	case !strings.HasPrefix(migUUID, migUUIDPrefix):
		return "", "", fmt.Errorf("label %s=%q is not a MIG instance UUID (%s...)", labelDRAMIGDeviceUUID, migUUID, migUUIDPrefix)
	case instance == "":
		return "", "", fmt.Errorf("label %s=%q on a series without %s: a whole GPU's reading named after one of its instances", labelDRAMIGDeviceUUID, migUUID, labelGPUInstance)
	}
	return profile, migUUID, nil
}

// instanceShare is the compute share of the MIG instance a series reads, 0
// for a whole GPU. An instance must name its profile: without it the
// instance's part of the GPU, which the idle split weighs it by, is unknown.
func instanceShare(instance, profile, model string) (float64, error) {
	switch {
	case instance == "" && profile == "":
		return 0, nil
	case instance == "":
		return 0, fmt.Errorf("label %s=%q without %s", labelGPUProfile, profile, labelGPUInstance)
	case profile == "":
		return 0, fmt.Errorf("label %s=%q without %s", labelGPUInstance, instance, labelGPUProfile)
	}
	share, err := schedloop.MIGComputeShare(model, profile)
	if err != nil {
		return 0, fmt.Errorf("label %s: %w", labelGPUProfile, err)
	}
	return share, nil
}

// smallSet is the number of samples up to which a linear scan finds a
// series faster than a map: a node has a handful of GPUs, and a map per
// page cost more in allocation and hashing than it saved.
const smallSet = 32

// sampleSet merges the one-metric-per-series shape of the exposition format
// into one GPUSample per seriesKey.
type sampleSet struct {
	// targetLabelsRenamed says the plain pod/namespace/container labels
	// belong to the scrape target (the exporter pod), not to the GPU's user.
	targetLabelsRenamed bool
	samples             []schedloop.GPUSample
	// keys[i] is the key of samples[i] until the samples are sorted; index
	// maps them back once there are more than smallSet.
	keys  []seriesKey
	index map[seriesKey]int
	// models is the modelName label of each GPU UUID, for the inventory, in
	// the order the UUIDs first appear; modelIndex finds them on large pages.
	models     []uuidModel
	modelIndex map[string]int
	// modelBuf holds models for a page of a few GPUs without an allocation
	// of its own.
	modelBuf [8]uuidModel
}

type uuidModel struct{ uuid, model string }

func newSampleSet(sizeHint int) *sampleSet {
	s := &sampleSet{samples: make([]schedloop.GPUSample, 0, sizeHint)}
	s.models = s.modelBuf[:0]
	return s
}

// fieldIndex is the index in Metrics of metric, -1 for metrics that
// GPUSample does not carry. It takes the name as bytes too, straight from a
// page: the switch compares them without converting them to a string.
func fieldIndex[T string | []byte](metric T) int {
	switch string(metric) {
	case MetricGPUUtil:
		return 0
	case MetricGrEngineActive:
		return 1
	case MetricSMActive:
		return 2
	case MetricFBUsed:
		return 3
	case MetricPowerUsage:
		return 4
	}
	return -1
}

// setFieldIndex is setField for the metric Metrics[m].
func setFieldIndex(s *schedloop.GPUSample, m int, v float64) {
	switch m {
	case 0:
		s.GPUUtil = v
	case 1:
		s.GrEngineActive = v
	case 2:
		s.SMActive = v
	case 3:
		s.FBUsedMiB = v
	case 4:
		s.PowerWatts = v
	}
}

// add records metric=v for the series described by label at time t. Metrics
// that GPUSample does not carry are ignored.
func (s *sampleSet) add(metric string, label labelFunc, v float64, t time.Time) error {
	m := fieldIndex(metric)
	if m < 0 {
		return nil
	}
	uuid := label(labelUUID)
	if uuid == "" {
		return missingUUID(metric)
	}
	k := seriesKey{uuid: uuid, gpuInstance: label(labelGPUInstance), unixMilli: t.UnixMilli()}
	k.namespace, k.pod, k.container = label(exportedPrefix+labelNamespace), label(exportedPrefix+labelPod), label(exportedPrefix+labelContainer)
	if !s.exported(&k) {
		k.namespace, k.pod, k.container = label(labelNamespace), label(labelPod), label(labelContainer)
	}
	i, ok, newUUID := s.find(&k)
	if !ok {
		l := seriesLabels{gpu: label(labelGPU), hostname: label(labelHostname), model: label(labelModel), gpuInstance: k.gpuInstance}
		l.resolveInstance(label)
		var err error
		if i, err = s.insert(&k, newUUID, metric, &l, t); err != nil {
			return err
		}
	}
	setFieldIndex(&s.samples[i], m, v)
	return nil
}

// addLabels is add for Metrics[m] and labels already looked up; it returns
// the index of the sample that took the value.
func (s *sampleSet) addLabels(m int, l *seriesLabels, v float64, t time.Time) (int, error) {
	if l.uuid == "" {
		return -1, missingUUID(Metrics[m])
	}
	k := seriesKey{uuid: l.uuid, gpuInstance: l.gpuInstance, unixMilli: t.UnixMilli()}
	k.namespace, k.pod, k.container = l.exportedNamespace, l.exportedPod, l.exportedContainer
	if !s.exported(&k) {
		k.namespace, k.pod, k.container = l.namespace, l.pod, l.container
	}
	i, ok, newUUID := s.find(&k)
	if !ok {
		var err error
		if i, err = s.insert(&k, newUUID, Metrics[m], l, t); err != nil {
			return -1, err
		}
	}
	setFieldIndex(&s.samples[i], m, v)
	return i, nil
}

func missingUUID(metric string) error {
	return fmt.Errorf("metric %s: series without a %s label cannot be joined to a GPU", metric, labelUUID)
}

// find returns the index of the sample of k. On a small set, newUUID also
// says whether no sample has k's UUID yet, which the scan learns for free.
func (s *sampleSet) find(k *seriesKey) (i int, ok, newUUID bool) {
	if s.index != nil {
		i, ok = s.index[*k]
		return i, ok, !ok && s.modelOf(k.uuid) < 0
	}
	newUUID = true
	for i := range s.keys {
		if s.keys[i].uuid == k.uuid {
			newUUID = false
			if s.keys[i] == *k {
				return i, true, false
			}
		}
	}
	return -1, false, newUUID
}

// insert adds an empty sample for k, described by l, and returns its index.
func (s *sampleSet) insert(k *seriesKey, newUUID bool, metric string, l *seriesLabels, t time.Time) (int, error) {
	idx := -1
	if l.gpu != "" {
		n, err := strconv.Atoi(l.gpu)
		if err != nil || n < 0 {
			return -1, fmt.Errorf("metric %s GPU %s: label %s=%q is not a GPU index", metric, k.uuid, labelGPU, l.gpu)
		}
		idx = n
	}
	if l.shareErr != nil {
		return -1, fmt.Errorf("metric %s GPU %s: %w", metric, k.uuid, l.shareErr)
	}
	s.samples = append(s.samples, schedloop.GPUSample{
		Time: t, GPUUUID: k.uuid, Node: l.hostname, GPUIndex: idx,
		PodNamespace: k.namespace, PodName: k.pod, Container: k.container,
		GPUInstance: k.gpuInstance, GPUInstanceProfile: l.profile, ComputeShare: l.share, MIGDeviceUUID: l.migUUID,
	})
	s.keys = append(s.keys, *k)
	i := len(s.samples) - 1
	if s.index != nil {
		s.index[*k] = i
	} else if len(s.keys) > smallSet {
		s.index = make(map[seriesKey]int, max(2*len(s.keys), cap(s.samples)))
		for j := range s.keys {
			s.index[s.keys[j]] = j
		}
	}
	if newUUID {
		s.models = append(s.models, uuidModel{k.uuid, l.model})
		if s.modelIndex != nil {
			s.modelIndex[k.uuid] = len(s.models) - 1
		} else if len(s.models) > smallSet {
			s.modelIndex = make(map[string]int, max(2*len(s.models), cap(s.samples)))
			for j, um := range s.models {
				s.modelIndex[um.uuid] = j
			}
		}
	}
	return i, nil
}

// modelOf returns the index in models of uuid, -1 if it has none.
func (s *sampleSet) modelOf(uuid string) int {
	if s.modelIndex != nil {
		if j, ok := s.modelIndex[uuid]; ok {
			return j
		}
		return -1
	}
	for j := range s.models {
		if s.models[j].uuid == uuid {
			return j
		}
	}
	return -1
}

// exported says whether the GPU's user is named by the exported_ pod
// labels, now in k: they are, once the scrape target's own took the plain
// names.
func (s *sampleSet) exported(k *seriesKey) bool {
	return s.targetLabelsRenamed || k.namespace != "" || k.pod != "" || k.container != ""
}

// inventory lists the GPUs the samples name, once each, with the model the
// page gave them, and after them the MIG instances, once each: an instance
// shares its GPU's UUID and index and is told apart by Instance.
func (s *sampleSet) inventory() []schedloop.GPU {
	var instances []schedloop.GPU
	var instanceSeen map[[2]string]bool
	// listed is indexed like models: every sample's UUID has a model entry.
	var listedSmall uint64
	var listed []bool
	if len(s.models) > 64 {
		listed = make([]bool, len(s.models))
	}
	var out []schedloop.GPU
	j := 0
	for i := range s.samples {
		g := &s.samples[i]
		if g.GPUIndex < 0 || g.Node == "" {
			continue
		}
		// Samples still in the order they were added meet the UUIDs in
		// the order of models: the last one found or the next.
		switch {
		case j < len(s.models) && s.models[j].uuid == g.GPUUUID:
		case j+1 < len(s.models) && s.models[j+1].uuid == g.GPUUUID:
			j++
		default:
			j = s.modelOf(g.GPUUUID)
		}
		if g.GPUInstance != "" {
			key := [2]string{g.GPUUUID, g.GPUInstance}
			if !instanceSeen[key] {
				if instanceSeen == nil {
					instanceSeen = map[[2]string]bool{}
				}
				instanceSeen[key] = true
				instances = append(instances, schedloop.GPU{UUID: g.GPUUUID, Node: g.Node, Index: g.GPUIndex,
					Model: s.models[j].model, MIGProfile: g.GPUInstanceProfile, Instance: g.GPUInstance, MIGUUID: g.MIGDeviceUUID})
			}
		}
		if listed != nil {
			if listed[j] {
				continue
			}
			listed[j] = true
		} else {
			if listedSmall&(1<<j) != 0 {
				continue
			}
			listedSmall |= 1 << j
		}
		if out == nil {
			out = make([]schedloop.GPU, 0, len(s.models))
		}
		out = append(out, schedloop.GPU{UUID: g.GPUUUID, Node: g.Node, Index: g.GPUIndex, Model: s.models[j].model})
	}
	return append(out, instances...)
}

// sorted returns the samples in a stable order (time, node, GPU index, UUID,
// attribution) so that output and golden files do not depend on map order.
func (s *sampleSet) sorted() []schedloop.GPUSample {
	slices.SortFunc(s.samples, compareSamples)
	return s.samples
}

// compareSamples stops at the first field that differs: cmp.Or would
// compare every field of every pair, strings included, before choosing.
func compareSamples(a, b schedloop.GPUSample) int {
	if c := a.Time.Compare(b.Time); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Node, b.Node); c != 0 {
		return c
	}
	if c := cmp.Compare(a.GPUIndex, b.GPUIndex); c != 0 {
		return c
	}
	return cmp.Or(
		cmp.Compare(a.GPUUUID, b.GPUUUID),
		cmp.Compare(a.PodNamespace, b.PodNamespace),
		cmp.Compare(a.PodName, b.PodName),
		cmp.Compare(a.Container, b.Container),
		cmp.Compare(a.GPUInstance, b.GPUInstance),
		cmp.Compare(a.GPUUtil, b.GPUUtil),
		cmp.Compare(a.FBUsedMiB, b.FBUsedMiB),
		cmp.Compare(a.PowerWatts, b.PowerWatts),
		cmp.Compare(a.SMActive, b.SMActive),
		cmp.Compare(a.GrEngineActive, b.GrEngineActive),
	)
}
