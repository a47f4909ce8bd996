package main

import (
	_ "embed"
	"fmt"
	"os"

	"github.com/schedloop/schedloop/internal/profile"
)

// stockProfile is what an untuned kube-scheduler does with GPUs, the profile
// the first replay runs under unless -before-profile names another.
//
//go:embed testdata/stock-leastallocated.yaml
var stockProfile []byte

// beforeProfile reads -before-profile, or the embedded stock profile when it
// is empty.
func beforeProfile(c config) (profile.Document, error) {
	b := stockProfile
	if c.beforeProfile != "" {
		var err error
		if b, err = os.ReadFile(c.beforeProfile); err != nil {
			return profile.Document{}, fmt.Errorf("flag -before-profile: %w", err)
		}
	}
	d, err := profile.Parse(b)
	if err != nil {
		return profile.Document{}, fmt.Errorf("flag -before-profile: %w", err)
	}
	return d, nil
}
