package dcgm

import (
	"bytes"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/schedloop/schedloop"
)

// The fast path for dcgm-exporter's text pages.
//
// expfmt builds a protobuf message per series and a map per page; at a few
// hundred series per GPU that caps one core at roughly 20,000 samples/s,
// below what a large cluster's exporters produce. dcgm-exporter prints one
// canonical shape, so parseTextFast reads exactly that shape in one pass
// without building families, and gives up (ok=false) on anything else so the
// caller parses the page with expfmt instead. It validates every line, not
// only the five it keeps, so a page it accepts is a page expfmt accepts, and
// it feeds the kept series to the same sampleSet in the same order, so the
// result is identical. FuzzParseTextFastMatchesExpfmt holds it to that.
//
// The canonical shape, per line:
//
//	# HELP <name> <text without backslashes>
//	# TYPE <name> gauge|counter|untyped
//	<name>{<label>="<value>",...} <value>[ <timestamp ms>]
//	(empty line)
//
// Anything else (escapes, spaces inside braces, a family split in two,
// histograms, non-ASCII help, a missing final newline) falls back.

// fastPair locates one label pair in the page.
type fastPair struct{ name, value span }

type span struct{ from, to int32 }

// keptSeries is a series of one of the five metrics, parsed and waiting to be
// added in Metrics order.
type keptSeries struct {
	metric       int8
	hasTS        bool
	value        float64
	ts           int64
	pairs, pairN int32
}

type fastParser struct {
	page  []byte
	pairs []fastPair
	kept  []keptSeries
	// names of families already finished; a family seen again means the
	// page is not canonical.
	done map[string]struct{}
	cur  []byte
	// state of the current family
	hasHelp, hasType, hasSamples bool
	// label-name sequences already checked for duplicates.
	checked [][]byte
	seq     []byte
	strs    map[string]string
}

// parseTextFast parses page if it is in the canonical shape; ok is false
// when the caller must use expfmt.
func parseTextFast(page []byte, at time.Time) (samples []schedloop.GPUSample, err error, ok bool) {
	if len(page) > 0 && page[len(page)-1] != '\n' {
		return nil, nil, false
	}
	if len(page) > 1<<30 {
		return nil, nil, false
	}
	p := &fastParser{page: page, done: map[string]struct{}{}, strs: map[string]string{}}
	// Pre-size for a page where a quarter of the lines are kept, as in
	// dcgm-exporter's default field list.
	lines := bytes.Count(page, []byte{'\n'})
	p.kept = make([]keptSeries, 0, lines/4+1)
	p.pairs = make([]fastPair, 0, (lines/4+1)*11)
	for off := 0; off < len(page); {
		end := off + bytes.IndexByte(page[off:], '\n')
		if !p.line(off, end) {
			return nil, nil, false
		}
		off = end + 1
	}
	set := newSampleSet(len(p.kept) / len(Metrics))
	for m := range Metrics {
		name := Metrics[m]
		for i := range p.kept {
			k := &p.kept[i]
			if int(k.metric) != m {
				continue
			}
			pairs := p.pairs[k.pairs : k.pairs+k.pairN]
			label := func(n string) string {
				for _, lp := range pairs {
					if string(page[lp.name.from:lp.name.to]) == n {
						return p.str(page[lp.value.from:lp.value.to])
					}
				}
				return ""
			}
			t := at
			if k.hasTS {
				t = time.UnixMilli(k.ts)
			}
			if err := set.add(name, label, k.value, t); err != nil {
				return nil, err, true
			}
		}
	}
	return set.sorted(), nil, true
}

// str interns label values: a page repeats each host, pod and UUID dozens of
// times.
func (p *fastParser) str(b []byte) string {
	if s, ok := p.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	p.strs[s] = s
	return s
}

func (p *fastParser) line(off, end int) bool {
	l := p.page[off:end]
	if len(l) == 0 {
		return true
	}
	if l[0] == '#' {
		return p.comment(l)
	}
	// name
	i := 0
	for i < len(l) && isNameByte(l[i], i == 0) {
		i++
	}
	if i == 0 || i == len(l) {
		return false
	}
	if !p.family(l[:i]) {
		return false
	}
	p.hasSamples = true
	metric := int8(-1)
	for m, name := range Metrics {
		if string(l[:i]) == name {
			metric = int8(m)
			break
		}
	}
	pairStart := int32(len(p.pairs))
	if l[i] == '{' {
		i++
		p.seq = p.seq[:0]
		for {
			ns := i
			for i < len(l) && isLabelByte(l[i], i == ns) {
				i++
			}
			if i == ns || i+2 > len(l) || l[i] != '=' || l[i+1] != '"' {
				return false
			}
			if l[ns] == '_' && ns+1 < i && l[ns+1] == '_' {
				return false
			}
			ne := i
			i += 2
			q := bytes.IndexByte(l[i:], '"')
			if q < 0 {
				return false
			}
			v := l[i : i+q]
			if bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v) {
				return false
			}
			p.seq = append(p.seq, l[ns:ne]...)
			p.seq = append(p.seq, 0)
			if metric >= 0 {
				p.pairs = append(p.pairs, fastPair{
					name:  span{int32(off + ns), int32(off + ne)},
					value: span{int32(off + i), int32(off + i + q)},
				})
			}
			i += q + 1
			if i >= len(l) {
				return false
			}
			if l[i] == '}' {
				i++
				break
			}
			if l[i] != ',' {
				return false
			}
			i++
		}
		if !p.uniqueNames() {
			return false
		}
	}
	if i >= len(l) || l[i] != ' ' {
		return false
	}
	i++
	rest := l[i:]
	valTok, tsTok, hasTS := rest, []byte(nil), false
	if sp := bytes.IndexByte(rest, ' '); sp >= 0 {
		valTok, tsTok, hasTS = rest[:sp], rest[sp+1:], true
		if len(tsTok) == 0 || bytes.IndexByte(tsTok, ' ') >= 0 {
			return false
		}
	}
	if len(valTok) == 0 || bytes.ContainsAny(valTok, "pP_\t") {
		return false
	}
	v, err := strconv.ParseFloat(string(valTok), 64)
	if err != nil {
		return false
	}
	var ts int64
	if hasTS {
		if bytes.IndexByte(tsTok, '\t') >= 0 {
			return false
		}
		if ts, err = strconv.ParseInt(string(tsTok), 10, 64); err != nil {
			return false
		}
	}
	if metric >= 0 {
		p.kept = append(p.kept, keptSeries{metric: metric, hasTS: hasTS, value: v, ts: ts,
			pairs: pairStart, pairN: int32(len(p.pairs)) - pairStart})
	}
	return true
}

// comment handles HELP and TYPE lines; other comments are skipped, unless
// they could be read as HELP or TYPE by a lenient tokenizer.
func (p *fastParser) comment(l []byte) bool {
	var help bool
	switch {
	case bytes.HasPrefix(l, []byte("# HELP ")):
		help = true
	case bytes.HasPrefix(l, []byte("# TYPE ")):
	default:
		return !bytes.Contains(l, []byte("HELP")) && !bytes.Contains(l, []byte("TYPE"))
	}
	rest := l[len("# HELP "):]
	i := 0
	for i < len(rest) && isNameByte(rest[i], i == 0) {
		i++
	}
	if i == 0 || i == len(rest) || rest[i] != ' ' || i+1 == len(rest) {
		return false
	}
	name, text := rest[:i], rest[i+1:]
	if !p.family(name) {
		return false
	}
	if help {
		if p.hasHelp || text[0] == ' ' || text[0] == '\t' || bytes.IndexByte(text, '\\') >= 0 {
			return false
		}
		for _, b := range text {
			if b >= utf8.RuneSelf || b == '\r' {
				return false
			}
		}
		p.hasHelp = true
		return true
	}
	if p.hasType || p.hasSamples {
		return false
	}
	switch string(text) {
	case "gauge", "counter", "untyped":
	default:
		return false
	}
	p.hasType = true
	return true
}

// family switches to the family name belongs to; a family that reappears
// after another is not canonical.
func (p *fastParser) family(name []byte) bool {
	if bytes.Equal(name, p.cur) {
		return true
	}
	if _, seen := p.done[string(name)]; seen {
		return false
	}
	if len(p.cur) > 0 {
		p.done[string(p.cur)] = struct{}{}
	}
	p.cur = append(p.cur[:0], name...)
	p.hasHelp, p.hasType, p.hasSamples = false, false, false
	return true
}

// uniqueNames checks the label names of the line just read (in p.seq) for
// duplicates, remembering sequences already checked: every line of a page
// tends to carry the same few.
func (p *fastParser) uniqueNames() bool {
	for _, c := range p.checked {
		if bytes.Equal(c, p.seq) {
			return true
		}
	}
	names := bytes.Split(p.seq[:len(p.seq)-1], []byte{0})
	for a := range names {
		for b := a + 1; b < len(names); b++ {
			if bytes.Equal(names[a], names[b]) {
				return false
			}
		}
	}
	if len(p.checked) < 16 {
		p.checked = append(p.checked, bytes.Clone(p.seq))
	}
	return true
}

func isNameByte(b byte, first bool) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b == '_' || b == ':' || !first && b >= '0' && b <= '9'
}

func isLabelByte(b byte, first bool) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b == '_' || !first && b >= '0' && b <= '9'
}
