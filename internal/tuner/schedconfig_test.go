package tuner

import (
	"encoding/json"
	"strings"
	"testing"

	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/schedloop/schedloop/internal/profile"
)

func TestSchedulerConfig(t *testing.T) {
	spread := profile.Default()
	spread.Name, spread.Weights = "spready", map[string]float64{"spread": 30, "bestfit": 10}
	tests := []struct {
		doc      profile.Document
		strategy configv1.ScoringStrategyType
		weight   int32
	}{
		{profile.Default(), configv1.MostAllocated, 4}, // (5+2)/17 of the weight packs
		{spread, configv1.LeastAllocated, 8},
	}
	for _, tc := range tests {
		out, err := SchedulerConfig(tc.doc, "gpu-scheduler")
		if err != nil {
			t.Fatal(err)
		}
		var cfg configv1.KubeSchedulerConfiguration
		if err := yaml.UnmarshalStrict(out, &cfg); err != nil {
			t.Fatalf("%s: output is not a strict KubeSchedulerConfiguration: %v\n%s", tc.doc.Name, err, out)
		}
		p := cfg.Profiles[0]
		if cfg.Kind != "KubeSchedulerConfiguration" || *p.SchedulerName != "gpu-scheduler" ||
			p.Plugins.Score.Enabled[0].Name != "NodeResourcesFit" || *p.Plugins.Score.Enabled[0].Weight != tc.weight {
			t.Errorf("%s: %s", tc.doc.Name, out)
		}
		var args configv1.NodeResourcesFitArgs
		if err := json.Unmarshal(p.PluginConfig[0].Args.Raw, &args); err != nil {
			t.Fatal(err)
		}
		if args.ScoringStrategy.Type != tc.strategy || args.ScoringStrategy.Resources[0].Name != "nvidia.com/gpu" {
			t.Errorf("%s: args %+v", tc.doc.Name, args)
		}
		if !strings.HasPrefix(string(out), "# KubeSchedulerConfiguration approximating") || strings.Contains(string(out), "{}") {
			t.Errorf("%s: header missing or empty sections left:\n%s", tc.doc.Name, out)
		}
	}
}
