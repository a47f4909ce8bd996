package tuner

import (
	"encoding/json"
	"fmt"
	"math"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/schedloop/schedloop/internal/podspec"
	"github.com/schedloop/schedloop/internal/profile"
	"github.com/schedloop/schedloop/internal/scoring"
)

// packingTerms are the terms that prefer fuller nodes; a stock
// kube-scheduler can only express them as NodeResourcesFit's MostAllocated.
var packingTerms = []scoring.Term{scoring.TermFragmentation, scoring.TermBestFit, scoring.TermPacking,
	scoring.TermBinPack, scoring.TermDotProduct}

// SchedulerConfig renders d as a plain KubeSchedulerConfiguration for users
// of the stock kube-scheduler, who cannot load schedloop's plugins. It keeps
// what the stock plugins can say: packing-like terms become NodeResourcesFit
// with MostAllocated over nvidia.com/gpu (weighted 5 against CPU and memory
// 1), a dominant spread term LeastAllocated, and the plugin's weight is the
// profile's share of such terms, scaled to 1..10. The topology term, queue
// limits and the gang timeout have no stock equivalent; the header says so.
func SchedulerConfig(d profile.Document, schedulerName string) ([]byte, error) {
	w := d.ScoringWeights()
	var pack, total float64
	for t, v := range w {
		total += v
		for _, p := range packingTerms {
			if t == p {
				pack += v
			}
		}
	}
	spread := w[scoring.TermSpread]
	strategy := configv1.MostAllocated
	mapped := pack
	if spread > pack {
		strategy, mapped = configv1.LeastAllocated, spread
	}
	weight := int32(1)
	if total > 0 {
		weight = int32(max(1, math.Round(10*mapped/total)))
	}
	args := configv1.NodeResourcesFitArgs{
		TypeMeta: metav1.TypeMeta{APIVersion: configv1.SchemeGroupVersion.String(), Kind: "NodeResourcesFitArgs"},
		ScoringStrategy: &configv1.ScoringStrategy{Type: strategy, Resources: []configv1.ResourceSpec{
			{Name: string(podspec.ResourceGPU), Weight: 5}, {Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}}},
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("scheduler config for %s: %w", d.Name, err)
	}
	cfg := configv1.KubeSchedulerConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: configv1.SchemeGroupVersion.String(), Kind: "KubeSchedulerConfiguration"},
		Profiles: []configv1.KubeSchedulerProfile{{
			SchedulerName: &schedulerName,
			Plugins: &configv1.Plugins{Score: configv1.PluginSet{Enabled: []configv1.Plugin{
				{Name: "NodeResourcesFit", Weight: &weight}}}},
			PluginConfig: []configv1.PluginConfig{{Name: "NodeResourcesFit", Args: runtime.RawExtension{Raw: raw}}},
		}},
	}
	// Marshal through a map so unset sections (leader election, client
	// connection) stay absent and keep the scheduler's defaults.
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("scheduler config for %s: %w", d.Name, err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, fmt.Errorf("scheduler config for %s: %w", d.Name, err)
	}
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok && allZero(sub) {
			delete(m, k)
		}
	}
	prune(m)
	body, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("scheduler config for %s: %w", d.Name, err)
	}
	header := fmt.Sprintf("# KubeSchedulerConfiguration approximating schedloop profile %q for the stock kube-scheduler.\n"+
		"# Weights: %v. Packing-like terms -> NodeResourcesFit %s, plugin weight %d.\n"+
		"# Not expressible here: the topology term (gang domains), queue limits and the gang timeout\n"+
		"# (%ds); run schedloop's scheduler for those.\n", d.Name, d.Weights, strategy, weight, d.GangTimeoutSeconds)
	return append([]byte(header), body...), nil
}

// allZero reports whether a decoded JSON object holds only zero values.
func allZero(m map[string]any) bool {
	for _, v := range m {
		switch x := v.(type) {
		case nil:
		case string:
			if x != "" && x != "0s" {
				return false
			}
		case float64:
			if x != 0 {
				return false
			}
		case bool:
			if x {
				return false
			}
		case map[string]any:
			if !allZero(x) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// prune drops empty objects at any depth (unset plugin sets).
func prune(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, sub := range x {
			if prune(sub) {
				delete(x, k)
			}
		}
		return len(x) == 0
	case []any:
		for _, sub := range x {
			prune(sub)
		}
	}
	return false
}
