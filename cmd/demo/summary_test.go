package main

import "testing"

func TestChange(t *testing.T) {
	tests := []struct {
		before, after float64
		want          string
	}{
		{5.9, 5.8, "-1.7%"},
		{0.001, 0.0195, "no change"}, // both print as 0.0 s
		{0, 0, "no change"},
		{0, 2, "n/a"},
		{2, 3, "+50.0%"},
	}
	for _, tc := range tests {
		if got := change(tc.before, tc.after); got != tc.want {
			t.Errorf("change(%v, %v) = %q, want %q", tc.before, tc.after, got, tc.want)
		}
	}
}
