package trace

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/schedloop/schedloop"
)

// JobsCSVHeader is the header of schedloop's own job CSV format. Only name,
// arrival_s, duration_s and gpus_per_member are required; the rest default to
// gang_size 1, priority 0, util DefaultUtil, outcome Succeeded, no MIG
// instances. A file without a column (one written before mig existed, say)
// reads as if every cell of it were empty.
//
// mig holds the MIG instances each member asks for beside its whole GPUs:
// '|'-separated <profile>:<count> entries, the profile as the device plugin
// names it after nvidia.com/mig- ("1g.10gb:2|3g.40gb:1"). Empty asks for none.
const JobsCSVHeader = "name,arrival_s,duration_s,gang_size,gpus_per_member,priority,queue,util,gpu_models,outcome,cpu_milli,memory_mib,gpu_milli,mig"

// MaxMIGPerMember bounds the MIG instances one member asks for: seven to a
// GPU at most, on MaxGPUsPerMember GPUs.
const MaxMIGPerMember = 7 * MaxGPUsPerMember

// ReadJobsCSV reads schedloop's job CSV format (see JobsCSVHeader). Times are
// seconds from the start of the trace; gpu_models are separated by '|'.
func ReadJobsCSV(r io.Reader) ([]Job, error) {
	t, err := newTable(r, "name", "arrival_s", "duration_s", "gpus_per_member")
	if err != nil {
		return nil, err
	}
	var jobs []Job
	seen := map[string]int{}
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return jobs, nil
		}
		j, err := jobCSVRow(t)
		if err != nil {
			return nil, err
		}
		if prev, dup := seen[j.Name]; dup {
			return nil, t.errf("name", "%q repeats line %d", j.Name, prev)
		}
		seen[j.Name] = t.line
		jobs = append(jobs, j)
	}
}

func jobCSVRow(t *table) (Job, error) {
	j := Job{Name: t.str("name"), Queue: t.str("queue")}
	if j.Name == "" {
		return j, t.errf("name", "empty")
	}
	arrival, err := t.seconds("arrival_s", 0)
	if err != nil {
		return j, err
	}
	dur, err := t.seconds("duration_s", 0)
	if err != nil {
		return j, err
	}
	j.Arrival, j.Duration = secondsToDuration(arrival), secondsToDuration(dur)
	if j.Members, err = t.intField("gang_size", 1, schedloop.MaxGangMembers); err != nil {
		return j, err
	}
	if j.GPUs, err = t.intField("gpus_per_member", 0, MaxGPUsPerMember); err != nil {
		return j, err
	}
	if j.GPUMilli, err = t.intField("gpu_milli", 0, 1000); err != nil {
		return j, err
	}
	if j.CPUMilli, err = t.int64("cpu_milli", 0); err != nil {
		return j, err
	}
	if j.MemoryMiB, err = t.int64("memory_mib", 0); err != nil {
		return j, err
	}
	if s := t.str("priority"); s != "" {
		p, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return j, t.errf("priority", "%q is not a 32-bit integer", s)
		}
		j.Priority = int32(p)
	}
	if j.Util, err = t.float("util", DefaultUtil); err != nil {
		return j, err
	}
	if s := t.str("gpu_models"); s != "" {
		j.GPUModels = strings.Split(s, "|")
	}
	j.Outcome = Succeeded
	if s := t.str("outcome"); s != "" {
		j.Outcome = Outcome(s)
	}
	if j.MIG, err = parseMIGCell(t.str("mig")); err != nil {
		return j, t.errf("mig", "%v", err)
	}
	if err := j.Validate(); err != nil {
		return j, fmt.Errorf("line %d: %w", t.line, err)
	}
	return j, nil
}

// parseMIGCell reads a mig cell ("1g.10gb:2|3g.40gb:1") into Job.MIG's
// form, keyed by resource name; "" is nil. A profile given twice, a count
// that is not a whole number in 0..MaxMIGPerMember, or a profile without
// its "<n>g" slice count is refused with the entry that is wrong.
func parseMIGCell(cell string) (map[string]int, error) {
	if cell == "" {
		return nil, nil
	}
	out := map[string]int{}
	for entry := range strings.SplitSeq(cell, "|") {
		profile, count, ok := strings.Cut(strings.TrimSpace(entry), ":")
		profile, count = strings.TrimSpace(profile), strings.TrimSpace(count)
		if !ok || profile == "" {
			return nil, fmt.Errorf("%q is not <profile>:<count> (e.g. 1g.10gb:2)", entry)
		}
		if _, err := schedloop.MIGProfileSlices(profile); err != nil {
			return nil, fmt.Errorf("%q: %w", entry, err)
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 0 || n > MaxMIGPerMember {
			return nil, fmt.Errorf("%q: count %q is not a whole number in 0..%d", entry, count, MaxMIGPerMember)
		}
		name := schedloop.MIGResourcePrefix + profile
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("profile %s given twice", profile)
		}
		out[name] = n
	}
	return out, nil
}

// migCell is the mig cell of counts, profiles in order, the form
// parseMIGCell reads; counts keyed by anything but a MIG resource are
// left out, as no instance answers to them.
func migCell(counts map[string]int) string {
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(counts)) {
		if p, ok := strings.CutPrefix(r, schedloop.MIGResourcePrefix); ok {
			parts = append(parts, p+":"+strconv.Itoa(counts[r]))
		}
	}
	return strings.Join(parts, "|")
}

// WriteJobsCSV writes jobs in schedloop's job CSV format; ReadJobsCSV reads it back.
func WriteJobsCSV(w io.Writer, jobs []Job) error {
	var b bytes.Buffer
	b.WriteString(JobsCSVHeader + "\n")
	f := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }
	for _, j := range jobs {
		mig := migCell(j.MIG)
		if strings.ContainsAny(j.Name+j.Queue+strings.Join(j.GPUModels, "")+mig, ",\"\n") {
			return fmt.Errorf("job %s: name, queue, gpu models and MIG profiles must not hold commas, quotes or newlines", j.Name)
		}
		fmt.Fprintf(&b, "%s,%s,%s,%d,%d,%d,%s,%s,%s,%s,%d,%d,%d,%s\n",
			j.Name, f(j.Arrival), f(j.Duration), j.Members, j.GPUs, j.Priority, j.Queue,
			strconv.FormatFloat(j.Util, 'f', -1, 64), strings.Join(j.GPUModels, "|"), j.Outcome,
			j.CPUMilli, j.MemoryMiB, j.GPUMilli, mig)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// jobsFile is the YAML form of schedloop's job format.
type jobsFile struct {
	Jobs []jobYAML `json:"jobs"`
}

type jobYAML struct {
	Name          string   `json:"name"`
	Arrival       string   `json:"arrival"`  // Go duration from trace start, e.g. 90s
	Duration      string   `json:"duration"` // Go duration, e.g. 2h30m
	GangSize      *int     `json:"gangSize,omitempty"`
	GPUsPerMember int      `json:"gpusPerMember"`
	GPUMilli      int      `json:"gpuMilli,omitempty"`
	CPUMilli      int64    `json:"cpuMilli,omitempty"`
	MemoryMiB     int64    `json:"memoryMiB,omitempty"`
	GPUModels     []string `json:"gpuModels,omitempty"`
	Priority      int32    `json:"priority,omitempty"`
	Queue         string   `json:"queue,omitempty"`
	Util          *float64 `json:"util,omitempty"`
	Outcome       string   `json:"outcome,omitempty"`
	// MIG is the MIG instances per member by profile, as the CSV's mig
	// column gives them: {1g.10gb: 2}.
	MIG map[string]int `json:"mig,omitempty"`
}

// ReadJobsYAML reads schedloop's job YAML format:
//
//	jobs:
//	- name: train-a
//	  arrival: 30s
//	  duration: 20m
//	  gangSize: 4
//	  gpusPerMember: 8
//	  priority: 100
//	  queue: research
//	  util: 0.9        # 0 holds the GPUs idle; omitted = DefaultUtil
//	  outcome: Failed  # omitted = Succeeded
//	  mig: {1g.10gb: 2} # MIG instances per member by profile; omitted = none
//
// Unknown fields are errors.
func ReadJobsYAML(r io.Reader) ([]Job, error) {
	data, err := readYAML(r)
	if err != nil {
		return nil, fmt.Errorf("read jobs yaml: %w", err)
	}
	var f jobsFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("parse jobs yaml: %w", err)
	}
	jobs := make([]Job, 0, len(f.Jobs))
	seen := map[string]int{}
	for i, y := range f.Jobs {
		j, err := y.job()
		if err != nil {
			return nil, fmt.Errorf("jobs[%d]: %w", i, err)
		}
		if prev, dup := seen[j.Name]; dup {
			return nil, fmt.Errorf("jobs[%d]: field name: %q repeats jobs[%d]", i, j.Name, prev)
		}
		seen[j.Name] = i
		jobs = append(jobs, j)
	}
	return jobs, nil
}

func (y jobYAML) job() (Job, error) {
	j := Job{
		Name: y.Name, Members: 1, GPUs: y.GPUsPerMember, GPUMilli: y.GPUMilli,
		CPUMilli: y.CPUMilli, MemoryMiB: y.MemoryMiB, GPUModels: y.GPUModels,
		Priority: y.Priority, Queue: y.Queue, Util: DefaultUtil, Outcome: Succeeded,
	}
	var err error
	if j.Arrival, err = parseDuration("arrival", y.Arrival); err != nil {
		return j, err
	}
	if j.Duration, err = parseDuration("duration", y.Duration); err != nil {
		return j, err
	}
	if y.GangSize != nil {
		j.Members = *y.GangSize
	}
	if y.Util != nil {
		j.Util = *y.Util
	}
	if y.Outcome != "" {
		j.Outcome = Outcome(y.Outcome)
	}
	for profile, n := range y.MIG {
		if j.MIG == nil {
			j.MIG = map[string]int{}
		}
		j.MIG[schedloop.MIGResourcePrefix+profile] = n
	}
	return j, j.Validate()
}

func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("field %s: %q is not a duration like 90s or 2h30m", field, s)
	}
	return d, nil
}
