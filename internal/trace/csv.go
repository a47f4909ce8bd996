package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// table reads a CSV file with a header row and gives access to cells by
// column name, with errors that name the line, the field and the value.
type table struct {
	r     *csv.Reader
	names []string // column names in file order
	cols  map[string]int
	rec   []string
	line  int
}

// newTable reads the header and checks that every required column is there.
func newTable(r io.Reader, required ...string) (*table, error) {
	cr := csv.NewReader(newBoundedLines(r, MaxLineBytes))
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("line 1: missing header")
	}
	if err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	t := &table{r: cr, cols: make(map[string]int, len(header))}
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		t.names = append(t.names, h)
		t.cols[h] = i
	}
	for _, c := range required {
		if _, ok := t.cols[c]; !ok {
			return nil, fmt.Errorf("line 1: header lacks column %q (have %s)", c, strings.Join(header, ","))
		}
	}
	return t, nil
}

// next advances to the next non-empty record; it returns false at the end.
func (t *table) next() (bool, error) {
	for {
		rec, err := t.r.Read()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		t.line, _ = t.r.FieldPos(0)
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		// A row cut short would otherwise read its missing cells as
		// defaults, a required value silently becoming 0.
		if len(rec) < len(t.names) {
			return false, fmt.Errorf("line %d: has %d fields, the header names %d (%s missing): a truncated row",
				t.line, len(rec), len(t.names), t.names[len(rec)])
		}
		for i, cell := range rec {
			col := fmt.Sprintf("%d", i+1)
			if i < len(t.names) {
				col = t.names[i]
			}
			switch {
			case len(cell) > MaxFieldBytes:
				return false, fmt.Errorf("line %d: field %s: longer than %d bytes", t.line, col, MaxFieldBytes)
			case strings.IndexByte(cell, 0) >= 0:
				return false, fmt.Errorf("line %d: field %s: %q holds a NUL byte", t.line, col, cell)
			case !utf8.ValidString(cell):
				return false, fmt.Errorf("line %d: field %s: %q is not valid UTF-8", t.line, col, cell)
			}
		}
		t.rec = rec
		return true, nil
	}
}

func (t *table) has(col string) bool { _, ok := t.cols[col]; return ok }

// str is the trimmed cell of col, "" when the row is short or the column absent.
func (t *table) str(col string) string {
	i, ok := t.cols[col]
	if !ok || i >= len(t.rec) {
		return ""
	}
	return strings.TrimSpace(t.rec[i])
}

func (t *table) errf(col, format string, args ...any) error {
	return fmt.Errorf("line %d: field %s: %s", t.line, col, fmt.Sprintf(format, args...))
}

// int64 parses col as an integer; an empty cell is def.
func (t *table) int64(col string, def int64) (int64, error) {
	s := t.str(col)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, t.errf(col, "%q is not an integer", s)
	}
	if v < 0 {
		return 0, t.errf(col, "%q is negative", s)
	}
	return v, nil
}

// intField is int64 narrowed to int with an upper bound.
func (t *table) intField(col string, def, max int64) (int, error) {
	v, err := t.int64(col, def)
	if err != nil {
		return 0, err
	}
	if v > max {
		return 0, t.errf(col, "%d is above %d", v, max)
	}
	return int(v), nil
}

// float parses col as a finite, non-negative number; an empty cell is def.
func (t *table) float(col string, def float64) (float64, error) {
	s := t.str(col)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, t.errf(col, "%q is not a number", s)
	}
	if v < 0 {
		return 0, t.errf(col, "%q is negative", s)
	}
	return v, nil
}

// maxSeconds keeps durations well inside time.Duration's range (about 292 years).
const maxSeconds = 100 * 365 * 24 * 3600

// seconds parses col as a number of seconds.
func (t *table) seconds(col string, def float64) (float64, error) {
	v, err := t.float(col, def)
	if err != nil {
		return 0, err
	}
	if v > maxSeconds {
		return 0, t.errf(col, "%v seconds is too long", v)
	}
	return v, nil
}

func secondsToDuration(s float64) time.Duration {
	return time.Duration(math.Round(s * float64(time.Second)))
}
