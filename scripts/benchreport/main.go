// Command benchreport turns `go test -bench` output into the project's
// headline lines, `BENCH <name> <value> <unit>`, one per figure.
//
// A benchmark declares a headline figure by reporting a metric whose unit is
// "<name>@<unit>" (b.ReportMetric(v, "store_copy_ratio@ratio")). When a
// benchmark ran several times (-count), the median is printed: machines are
// shared and noisy, and the median shrugs off one slow run.
//
// The raw benchmark output passes through to stderr so nothing is hidden.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	if err := run(os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

type figure struct {
	unit   string
	values []float64
}

func run(in io.Reader, out, raw io.Writer) error {
	figures := map[string]*figure{}
	var order []string
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(raw, line)
		fields := strings.Fields(line)
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		// fields: name iterations (value unit)...
		for i := 2; i+1 < len(fields); i += 2 {
			name, unit, ok := strings.Cut(fields[i+1], "@")
			if !ok {
				continue
			}
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return fmt.Errorf("metric %s in %q: value %q is not a number", fields[i+1], line, fields[i])
			}
			f := figures[name]
			if f == nil {
				f = &figure{unit: unit}
				figures[name] = f
				order = append(order, name)
			}
			f.values = append(f.values, v)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read benchmark output: %w", err)
	}
	for _, name := range order {
		f := figures[name]
		fmt.Fprintf(out, "BENCH %s %s %s\n", name, format(median(f.values)), f.unit)
	}
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func format(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}
