package trace

import (
	"fmt"
	"io"
	"maps"
	"path"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Well-known node label keys.
const (
	LabelSpine        = "topology.schedloop.io/spine"
	LabelRack         = "topology.schedloop.io/rack"
	LabelNVLinkDomain = "topology.schedloop.io/nvlink-domain"
	LabelHostname     = "kubernetes.io/hostname"
)

// DefaultLevels is the topology used when an inventory names none: spine,
// rack, NVLink domain, host (outermost first).
var DefaultLevels = []string{LabelSpine, LabelRack, LabelNVLinkDomain, LabelHostname}

// Inventory is a set of nodes and the ordered topology levels (node-label
// keys, outermost first, host last) that their labels describe.
type Inventory struct {
	Levels []string
	Nodes  []Node
}

type inventoryFile struct {
	Topology struct {
		Levels []string `json:"levels,omitempty"`
	} `json:"topology"`
	Groups []groupYAML `json:"groups"`
}

type groupYAML struct {
	NamePrefix   string            `json:"namePrefix"`
	Count        int               `json:"count"`
	GPUs         int               `json:"gpus"`
	GPUModel     string            `json:"gpuModel"`
	GPUMemoryMiB int64             `json:"gpuMemoryMiB,omitempty"`
	CPUMilli     int64             `json:"cpuMilli,omitempty"`
	MemoryMiB    int64             `json:"memoryMiB,omitempty"`
	MIG          map[string]int    `json:"mig,omitempty"`
	Fanout       []int             `json:"fanout,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// MaxInventoryNodes bounds an inventory so a typo cannot ask for a million nodes.
const MaxInventoryNodes = 100000

// ReadInventory reads an inventory YAML:
//
//	topology:
//	  levels: [topology.schedloop.io/spine, topology.schedloop.io/rack,
//	           topology.schedloop.io/nvlink-domain, kubernetes.io/hostname]
//	groups:
//	- namePrefix: gpu        # nodes gpu-000, gpu-001, ...
//	  count: 100
//	  gpus: 8
//	  gpuModel: NVIDIA-H100-80GB-HBM3
//	  gpuMemoryMiB: 81559
//	  cpuMilli: 192000
//	  memoryMiB: 2097152
//	  mig: {nvidia.com/mig-1g.10gb: 0}
//	  fanout: [1, 2, 4]      # children per level above the host: 1 spine, 2 racks, 4 domains per rack
//	  labels: {pool: training}
//
// Levels default to DefaultLevels; fanout defaults to one of each level.
// Unknown fields are errors.
func ReadInventory(r io.Reader) (Inventory, error) {
	data, err := readYAML(r)
	if err != nil {
		return Inventory{}, fmt.Errorf("read inventory: %w", err)
	}
	var f inventoryFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return Inventory{}, fmt.Errorf("parse inventory: %w", err)
	}
	inv := Inventory{Levels: f.Topology.Levels}
	if len(inv.Levels) == 0 {
		inv.Levels = DefaultLevels
	}
	if err := validateLevels(inv.Levels); err != nil {
		return Inventory{}, fmt.Errorf("topology: %w", err)
	}
	names := map[string]string{}
	for gi, g := range f.Groups {
		where := fmt.Sprintf("groups[%d]", gi)
		nodes, err := g.nodes(inv.Levels)
		if err != nil {
			return Inventory{}, fmt.Errorf("%s: %w", where, err)
		}
		if len(inv.Nodes)+len(nodes) > MaxInventoryNodes {
			return Inventory{}, fmt.Errorf("%s: field count: inventory exceeds %d nodes", where, MaxInventoryNodes)
		}
		for _, n := range nodes {
			if prev, dup := names[n.Name]; dup {
				return Inventory{}, fmt.Errorf("%s: node name %q repeats %s", where, n.Name, prev)
			}
			names[n.Name] = where
		}
		inv.Nodes = append(inv.Nodes, nodes...)
	}
	return inv, nil
}

func validateLevels(levels []string) error {
	seen := map[string]bool{}
	for i, l := range levels {
		if l == "" || strings.ContainsAny(l, " \t\n") {
			return fmt.Errorf("field levels[%d]: %q is not a label key", i, l)
		}
		if seen[l] {
			return fmt.Errorf("field levels[%d]: %q repeats", i, l)
		}
		seen[l] = true
	}
	return nil
}

func (g groupYAML) nodes(levels []string) ([]Node, error) {
	switch {
	case g.NamePrefix == "":
		return nil, fmt.Errorf("field namePrefix: empty")
	case g.Count < 1 || g.Count > MaxInventoryNodes:
		return nil, fmt.Errorf("field count: %d is outside 1..%d", g.Count, MaxInventoryNodes)
	case g.GPUs > 0 && g.GPUModel == "":
		return nil, fmt.Errorf("field gpuModel: empty for a group with %d GPUs", g.GPUs)
	}
	width := len(strconv.Itoa(g.Count - 1))
	if width < 3 {
		width = 3
	}
	nodes := make([]Node, g.Count)
	for i := range nodes {
		nodes[i] = Node{
			Name: fmt.Sprintf("%s-%0*d", g.NamePrefix, width, i), GPUs: g.GPUs, GPUModel: g.GPUModel,
			GPUMemoryMiB: g.GPUMemoryMiB, CPUMilli: g.CPUMilli, MemoryMiB: g.MemoryMiB,
			MIG: maps.Clone(g.MIG), Labels: maps.Clone(g.Labels),
		}
		if err := nodes[i].Validate(); err != nil {
			return nil, err
		}
	}
	if err := AssignTopology(nodes, g.NamePrefix, levels, g.Fanout); err != nil {
		return nil, err
	}
	return nodes, nil
}

// AssignTopology labels nodes with one value per topology level. fanout gives,
// for each level above the host, how many children each unit of the level
// above has (the first entry is the number of top-level units); missing
// entries are 1. Nodes are spread over the leaf units in order, as evenly as
// the count allows, so consecutive nodes share a domain. The host level's
// value is the node name. Values are prefixed with prefix so that groups do
// not share units by accident.
func AssignTopology(nodes []Node, prefix string, levels []string, fanout []int) error {
	above := len(levels) - 1
	if above < 0 {
		return nil
	}
	if len(fanout) > above {
		return fmt.Errorf("field fanout: %d entries for %d levels above the host", len(fanout), above)
	}
	fan := make([]int, above)
	leaves := 1
	for i := range fan {
		fan[i] = 1
		if i < len(fanout) {
			fan[i] = fanout[i]
		}
		if fan[i] < 1 || fan[i] > MaxInventoryNodes {
			return fmt.Errorf("field fanout[%d]: %d is outside 1..%d", i, fan[i], MaxInventoryNodes)
		}
		leaves *= fan[i]
		if leaves > MaxInventoryNodes {
			return fmt.Errorf("field fanout: more than %d leaf units", MaxInventoryNodes)
		}
	}
	for i := range nodes {
		n := &nodes[i]
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		leaf := i * leaves / len(nodes)
		// Decompose the leaf index into one digit per level, outermost first.
		digits := make([]int, above)
		for l := above - 1; l >= 0; l-- {
			digits[l] = leaf % fan[l]
			leaf /= fan[l]
		}
		value := prefix
		for l := 0; l < above; l++ {
			value += "-" + strconv.Itoa(digits[l])
			n.Labels[levels[l]] = shortLevel(levels[l]) + "-" + strings.TrimPrefix(value, "-")
		}
		n.Labels[levels[above]] = n.Name
	}
	return nil
}

// shortLevel is the last segment of a label key: topology.schedloop.io/rack -> rack.
func shortLevel(key string) string { return path.Base(key) }
