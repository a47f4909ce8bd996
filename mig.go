package schedloop

import (
	"fmt"
	"strconv"
	"strings"
)

// MIG partitions a GPU's compute into slices; a GPU instance holds a whole
// number of them, named by its profile ("3g.40gb" holds 3). NVIDIA's MIG User
// Guide lists seven slices for A100, A800, H100, H800, H20, H200, B200 and
// GB200, and four for A30 and the RTX PRO 6000 Blackwell; a model it does not
// list is taken to have seven, the common case.
const defaultMIGSlices = 7

// fourSliceModels are substrings of the model names dcgm-exporter prints
// (modelName) for GPUs whose MIG geometry has four compute slices.
var fourSliceModels = []string{"A30", "RTX PRO 6000"}

// MIGSlices is how many compute slices a GPU of model has under MIG.
func MIGSlices(model string) int {
	for _, m := range fourSliceModels {
		if strings.Contains(model, m) {
			return 4
		}
	}
	return defaultMIGSlices
}

// MIGProfileSlices is the number of compute slices a GPU instance of
// profile holds: the profile's "<n>g" part, which compute-instance profiles
// ("1c.2g.10gb") and media-extension suffixes ("1g.10gb+me") keep too. It
// says nothing of the GPU's total, which depends on its model (MIGSlices).
func MIGProfileSlices(profile string) (int, error) {
	for part := range strings.SplitSeq(profile, ".") {
		digits, ok := strings.CutSuffix(part, "g")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			continue
		}
		if n < 1 {
			return 0, fmt.Errorf("MIG profile %q: %d compute slices", profile, n)
		}
		return n, nil
	}
	return 0, fmt.Errorf("MIG profile %q: no \"<n>g\" compute slice count", profile)
}

// MIGComputeShare is the share of its GPU's compute (0..1] a GPU instance of
// profile holds on a GPU of model: a 1g instance of a seven-slice GPU holds
// 1/7 of it (MIGProfileSlices over MIGSlices). An empty profile is a whole
// GPU, share 1.
func MIGComputeShare(model, profile string) (float64, error) {
	if profile == "" {
		return 1, nil
	}
	n, err := MIGProfileSlices(profile)
	if err != nil {
		return 0, err
	}
	slices := MIGSlices(model)
	if n > slices {
		return 0, fmt.Errorf("MIG profile %q: %d compute slices, but a %q has %d", profile, n, model, slices)
	}
	return float64(n) / float64(slices), nil
}
