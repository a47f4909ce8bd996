package topology

import (
	"strings"
	"testing"
)

func TestFrameworkScoresMakeTheWinnerUnique(t *testing.T) {
	tests := []struct {
		name   string
		names  []string
		raw    []float64
		winner string
	}{
		{"tie goes to the smallest name", []string{"b", "a", "c"}, []float64{40, 40, 10}, "a"},
		{"rounding tie keeps the higher float", []string{"a", "b"}, []float64{86.6, 87.4}, "b"},
		{"tie at the top of the range", []string{"b", "a"}, []float64{100, 100}, "a"},
		{"tie at zero", []string{"b", "a"}, []float64{0, 0}, "a"},
	}
	for _, tc := range tests {
		got := FrameworkScores(tc.names, tc.raw)
		for name, v := range got {
			if v < 0 || v > 100 {
				t.Errorf("%s: score %s = %d outside 0..100", tc.name, name, v)
			}
			if name != tc.winner && v >= got[tc.winner] {
				t.Errorf("%s: %s scores %d, not below the winner %s (%d)", tc.name, name, v, tc.winner, got[tc.winner])
			}
		}
	}
}

func TestValidateArgs(t *testing.T) {
	tests := []struct {
		args Args
		want string
	}{
		{Args{Levels: []string{"rack", "nvl"}, WorkloadRefreshSeconds: 30}, ""},
		{Args{Levels: []string{"rack", "nvl"}, RequiredLevel: HostLevel, WorkloadRefreshSeconds: 30}, ""},
		{Args{Levels: []string{"rack", "rack"}, WorkloadRefreshSeconds: 30}, "levels[1]"},
		{Args{Levels: []string{"bad key!"}, WorkloadRefreshSeconds: 30}, "levels[0]"},
		{Args{Levels: []string{"rack"}, RequiredLevel: "zone", WorkloadRefreshSeconds: 30}, "requiredLevel"},
		{Args{Levels: []string{"rack"}}, "workloadRefreshSeconds"},
	}
	for _, tc := range tests {
		err := ValidateArgs(tc.args)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("ValidateArgs(%+v) = %v, want error naming %q", tc.args, err, tc.want)
		}
	}
}
