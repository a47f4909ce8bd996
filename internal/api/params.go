package api

import (
	"encoding/base64"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schedloop/schedloop/internal/store"
)

// Request parsing: every query parameter the API reads passes through here,
// is checked against a closed vocabulary or a strict syntax, and becomes a
// typed value. Errors name the parameter and the value that was refused.

const (
	defaultRange = 7 * 24 * time.Hour
	maxRange     = 400 * 24 * time.Hour
	// autoHourly is the longest range auto step draws hour by hour.
	autoHourly   = 72 * time.Hour
	maxBuckets   = 2400
	defaultLimit = 50
	maxLimit     = 500
	maxValues    = 50
	maxValueLen  = 253
	maxCursorLen = 512
	// maxRelative is the furthest back a relative time may reach (about
	// as far back as the years 2000 to 2200 that RFC 3339 times may name).
	maxRelative = 100 * 365 * 24 * time.Hour
)

// Query is a parsed dashboard request.
type Query struct {
	From, To time.Time
	Step     store.Resolution
	// StepAuto records that the step was chosen from the range.
	StepAuto   bool
	Nodes      []string
	Namespaces []string
	Queues     []string
	GPUModels  []string
	NodeLabels map[string]string
	GroupBy    store.Dimension
	Limit      int
	// Cursor is the decoded position after which a page starts ("" = first page).
	Cursor string
}

// ParamError is a request parameter the API refuses.
type ParamError struct {
	Param, Value, Problem string
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("parameter %s: %q %s", e.Param, e.Value, e.Problem)
}

func perr(param, value, format string, args ...any) error {
	if len(value) > 80 {
		value = value[:77] + "..."
	}
	return &ParamError{Param: param, Value: value, Problem: fmt.Sprintf(format, args...)}
}

var known = map[string]bool{"from": true, "to": true, "step": true, "node": true, "namespace": true, "queue": true,
	"gpu_model": true, "node_label": true, "group_by": true, "limit": true, "cursor": true,
	// read by handlers, not by ParseQuery
	"q": true, "kind": true, "status": true, "a": true, "b": true}

// ParseQuery parses the common parameters of a request made at now. The
// range is aligned outward to whole steps, so what is returned is what the
// response covers.
func ParseQuery(v url.Values, now time.Time) (Query, error) {
	q := Query{Limit: defaultLimit, GroupBy: store.ByNode}
	for _, k := range slices.Sorted(maps.Keys(v)) {
		if !known[k] {
			return q, perr(k, strings.Join(v[k], ","), "is not a parameter this API knows")
		}
		if len(v[k]) > maxValues {
			return q, perr(k, v[k][0], "is repeated %d times, over %d", len(v[k]), maxValues)
		}
	}
	now = now.UTC()
	to, err := parseTime("to", v.Get("to"), now, now)
	if err != nil {
		return q, err
	}
	from, err := parseTime("from", v.Get("from"), now, to.Add(-defaultRange))
	if err != nil {
		return q, err
	}
	if !from.Before(to) {
		return q, perr("from", v.Get("from"), "is not before to (%s)", to.Format(time.RFC3339))
	}
	if to.Sub(from) > maxRange {
		return q, perr("from", v.Get("from"), "starts %s before to, over the %d-day limit", to.Sub(from).Round(time.Hour), int(maxRange.Hours()/24))
	}
	switch step := v.Get("step"); step {
	case "", "auto":
		q.StepAuto = true
		if to.Sub(from) > autoHourly {
			q.Step = store.Daily
		}
	case "1h", "hour":
		q.Step = store.Hourly
	case "1d", "day":
		q.Step = store.Daily
	default:
		return q, perr("step", step, "is not one of auto, 1h, 1d")
	}
	q.From, q.To = q.Step.Align(from, to)
	if n := int(q.To.Sub(q.From) / q.Step.Duration()); n > maxBuckets {
		return q, perr("step", v.Get("step"), "gives %d buckets over this range, over %d: use 1d", n, maxBuckets)
	}

	lists := []struct {
		param string
		dst   *[]string
		re    *regexp.Regexp
		what  string
	}{
		{"node", &q.Nodes, nameRE, "a node name"},
		{"namespace", &q.Namespaces, nameRE, "a namespace"},
		{"queue", &q.Queues, nameRE, "a queue name"},
		{"gpu_model", &q.GPUModels, modelRE, "a GPU model (letters, digits, space, . _ -)"},
	}
	for _, l := range lists {
		vals, err := splitList(l.param, v[l.param], l.re, l.what)
		if err != nil {
			return q, err
		}
		*l.dst = vals
	}
	for _, raw := range v["node_label"] {
		for _, kv := range strings.Split(raw, ",") {
			key, val, ok := strings.Cut(kv, "=")
			if !ok || !labelKeyRE.MatchString(key) || len(key) > maxValueLen || !labelValueRE.MatchString(val) {
				return q, perr("node_label", kv, "is not key=value with a Kubernetes label key and value")
			}
			if q.NodeLabels == nil {
				q.NodeLabels = map[string]string{}
			}
			if prev, dup := q.NodeLabels[key]; dup && prev != val {
				return q, perr("node_label", kv, "asks for label %s twice with different values", key)
			}
			q.NodeLabels[key] = val
			if len(q.NodeLabels) > maxValues {
				return q, perr("node_label", kv, "makes %d labels, over %d", len(q.NodeLabels), maxValues)
			}
		}
	}
	if g := v.Get("group_by"); g != "" {
		if !slices.Contains(store.Dimensions, store.Dimension(g)) {
			return q, perr("group_by", g, "is not one of %s", dimensionList())
		}
		q.GroupBy = store.Dimension(g)
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxLimit {
			return q, perr("limit", l, "is not a whole number from 1 to %d", maxLimit)
		}
		q.Limit = n
	}
	if c := v.Get("cursor"); c != "" {
		if len(c) > maxCursorLen {
			return q, perr("cursor", c, "is longer than %d characters", maxCursorLen)
		}
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || !strings.HasPrefix(string(raw), cursorMagic) {
			return q, perr("cursor", c, "is not a cursor this API returned (pass next_cursor unchanged)")
		}
		q.Cursor = strings.TrimPrefix(string(raw), cursorMagic)
	}
	return q, nil
}

func dimensionList() string {
	var s []string
	for _, d := range store.Dimensions {
		s = append(s, string(d))
	}
	return strings.Join(s, ", ")
}

var (
	nameRE       = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	modelRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._-]*$`)
	labelKeyRE   = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
	labelValueRE = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$`)
	relativeRE   = regexp.MustCompile(`^-([0-9]{1,6})(m|h|d)$`)
)

// splitList accepts repeated parameters and comma-separated values.
func splitList(param string, raw []string, re *regexp.Regexp, what string) ([]string, error) {
	var out []string
	for _, r := range raw {
		for _, s := range strings.Split(r, ",") {
			if len(s) > maxValueLen || !re.MatchString(s) {
				return nil, perr(param, s, "is not %s", what)
			}
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	if len(out) > maxValues {
		return nil, perr(param, out[0], "lists %d values, over %d", len(out), maxValues)
	}
	return out, nil
}

// parseTime reads RFC 3339, "now" or a relative time such as -7d, -12h or
// -30m (before now).
func parseTime(param, s string, now, def time.Time) (time.Time, error) {
	switch {
	case s == "":
		return def, nil
	case s == "now":
		return now, nil
	}
	if m := relativeRE.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		unit := map[string]time.Duration{"m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[m[2]]
		// 999999d is past what a Duration holds; multiplying would wrap
		// around to a time after now.
		if time.Duration(n) > maxRelative/unit {
			return time.Time{}, perr(param, s, "reaches back more than %d days", int(maxRelative.Hours()/24))
		}
		return now.Add(-time.Duration(n) * unit), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, perr(param, s, "is not RFC 3339 (2026-11-30T10:00:00Z), a relative time (-7d, -12h, -30m) or now")
	}
	if t.Year() < 2000 || t.Year() > 2200 {
		return time.Time{}, perr(param, s, "is outside the years 2000 to 2200")
	}
	return t.UTC(), nil
}

// cursorMagic marks cursors this API made, so a stray value is refused
// rather than silently read as a position.
const cursorMagic = "sl1:"

// encodeCursor makes the opaque next_cursor for position pos.
func encodeCursor(pos string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorMagic + pos))
}

// offset reads a cursor that holds a row offset.
func (q Query) offset() (int, error) {
	if q.Cursor == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimPrefix(q.Cursor, "o"))
	if err != nil || !strings.HasPrefix(q.Cursor, "o") || n < 0 || n > 1_000_000 {
		return 0, perr("cursor", encodeCursor(q.Cursor), "is not a cursor of this list")
	}
	return n, nil
}

// Filter is the store filter of the query.
func (q Query) Filter() store.UsageFilter {
	return store.UsageFilter{From: q.From, To: q.To, Nodes: q.Nodes, Namespaces: q.Namespaces, Queues: q.Queues,
		GPUModels: q.GPUModels, NodeLabels: q.NodeLabels}
}

// StepName is how responses name the step.
func (q Query) StepName() string {
	if q.Step == store.Daily {
		return "1d"
	}
	return "1h"
}
