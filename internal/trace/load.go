package trace

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Format names a job or node file format.
type Format string

const (
	FormatAuto   Format = ""       // decided from the extension and the CSV header
	FormatYAML   Format = "yaml"   // schedloop job YAML or inventory YAML
	FormatCSV    Format = "csv"    // schedloop job CSV
	FormatOpenb  Format = "openb"  // Alibaba openb pod or node list
	FormatPhilly Format = "philly" // pollux_philly.csv or cluster_machine_list
)

// detect decides the format of a file from its name and first line.
func detect(path string, br *bufio.Reader) (Format, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return FormatYAML, nil
	}
	line, err := br.Peek(512)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return "", err
	}
	header := strings.ToLower(strings.SplitN(string(line), "\n", 2)[0])
	switch {
	case strings.HasPrefix(header, "name,cpu_milli"), strings.HasPrefix(header, "sn,"):
		return FormatOpenb, nil
	case strings.HasPrefix(header, "timestamp,"), strings.HasPrefix(header, "machineid"):
		return FormatPhilly, nil
	}
	return FormatCSV, nil
}

// LoadJobs reads a job file in the given format (FormatAuto detects it).
func LoadJobs(path string, format Format) ([]Job, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open job file: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	if format == FormatAuto {
		if format, err = detect(path, br); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	var jobs []Job
	switch format {
	case FormatYAML:
		jobs, err = ReadJobsYAML(br)
	case FormatCSV:
		jobs, err = ReadJobsCSV(br)
	case FormatOpenb:
		jobs, err = ReadOpenbPods(br)
	case FormatPhilly:
		jobs, err = ReadPhillyJobs(br)
	default:
		return nil, fmt.Errorf("job format %q: want one of yaml, csv, openb, philly", format)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return jobs, nil
}

// LoadOpenbShapes reads an openb pod list for an experiment that needs no
// times (see ReadOpenbShapes): the five-column lists as well as the full ones.
func LoadOpenbShapes(path string) ([]Job, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open pod list: %w", err)
	}
	defer f.Close()
	jobs, err := ReadOpenbShapes(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return jobs, nil
}

// LoadInventory reads nodes from an inventory YAML, an openb node list or a
// Philly machine list. CSV node lists carry no topology: they get levels and
// fanout from the arguments (see AssignTopology).
func LoadInventory(path string, format Format, levels []string, fanout []int) (Inventory, error) {
	f, err := os.Open(path)
	if err != nil {
		return Inventory{}, fmt.Errorf("open inventory: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	if format == FormatAuto {
		if format, err = detect(path, br); err != nil {
			return Inventory{}, fmt.Errorf("%s: %w", path, err)
		}
	}
	var nodes []Node
	switch format {
	case FormatYAML:
		inv, err := ReadInventory(br)
		if err != nil {
			return Inventory{}, fmt.Errorf("%s: %w", path, err)
		}
		return inv, nil
	case FormatOpenb:
		nodes, err = ReadOpenbNodes(br)
	case FormatPhilly:
		nodes, err = ReadPhillyMachines(br)
	default:
		return Inventory{}, fmt.Errorf("inventory format %q: want one of yaml, openb, philly", format)
	}
	if err != nil {
		return Inventory{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(levels) == 0 {
		levels = DefaultLevels
	}
	if err := AssignTopology(nodes, "", levels, fanout); err != nil {
		return Inventory{}, err
	}
	return Inventory{Levels: levels, Nodes: nodes}, nil
}
