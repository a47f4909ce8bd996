package dcgm

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
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
// caller parses the page with expfmt instead.
//
// What it checks: every line of the five families in Metrics in full, and
// the layout of every family (HELP and TYPE lines, a family never split in
// two, names and types the text format allows). Sample lines of the other
// families are skipped once they start with the current family's name: the
// collector reads nothing from them, and with dcgm-exporter's default
// counters they are three lines in four. The contract, which
// FuzzParseTextFastMatchesExpfmt holds it to: a page it accepts gives
// exactly the samples (or sample-level error) that expfmt gives for the same
// page with the other families' lines removed, and so exactly what expfmt
// gives for the whole page whenever expfmt accepts it. A malformed line in a
// family the collector does not store therefore no longer fails the scrape;
// on the expfmt fallback it still does.
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
// added in Metrics order. block is the index of its label block in the
// parser's cache, or -1 when its pairs are in fastParser.pairs.
type keptSeries struct {
	metric       int8
	hasTS        bool
	value        float64
	ts           int64
	block        int32
	pairs, pairN int32
}

// labelBlock is a label set ({...}) already validated on this page. Every
// family of a dcgm-exporter page repeats the same label set for each GPU, so
// a line whose next bytes equal a known block has that block's labels, and
// validating it again would give the same answer.
type labelBlock struct {
	text []byte // '{' through '}'
	// pairs is its range of fastParser.blockPairs, offsets relative to text.
	pairs span
	// known is the block as strings, nil until first used.
	known *knownLabels
}

// knownLabels is a label set validated on some page, as strings cut from
// one copy of it.
type knownLabels struct {
	pairs       []fastPair // offsets relative to '{'
	names, vals []string
	labels      seriesLabels // what a sample reads of it, looked up once
}

// labelSets remembers label sets across pages. An exporter prints the same
// label set for a GPU scrape after scrape, so validating it and copying its
// strings every time was repeated work, and the samples of successive
// scrapes held separate copies of the same strings. What a block parses to
// depends on its bytes alone. Scrapes run concurrently and almost only
// read it, so readers share the lock.
var labelSets = struct {
	sync.RWMutex
	m map[string]*knownLabels
}{m: make(map[string]*knownLabels)}

// maxLabelSets bounds labelSets (about 1 KB each): 4,000 nodes of 8 GPUs.
// When full it starts over, which also forgets the sets of pods long gone.
const maxLabelSets = 1 << 15

func lookupLabels(block []byte) *knownLabels {
	labelSets.RLock()
	k := labelSets.m[string(block)]
	labelSets.RUnlock()
	return k
}

func rememberLabels(block []byte, pairs []fastPair) *knownLabels {
	text := string(block)
	strs := make([]string, 2*len(pairs))
	for i, lp := range pairs {
		strs[i] = text[lp.name.from:lp.name.to]
		strs[len(pairs)+i] = text[lp.value.from:lp.value.to]
	}
	k := &knownLabels{pairs: slices.Clone(pairs), names: strs[:len(pairs)], vals: strs[len(pairs):]}
	k.labels = resolveLabels(func(n string) string {
		for i, name := range k.names {
			if name == n {
				return k.vals[i]
			}
		}
		return ""
	})
	labelSets.Lock()
	if len(labelSets.m) >= maxLabelSets {
		clear(labelSets.m)
	}
	labelSets.m[text] = k
	labelSets.Unlock()
	return k
}

// maxBlocks bounds the cache: a page of a few hundred GPUs or MIG
// instances still gains; beyond that lines are validated one by one.
const maxBlocks = 1024

// fastParser is the state of one page. Parsers are pooled, so a scrape
// does not regrow the same slices every round.
type fastParser struct {
	page  []byte
	pairs []fastPair
	kept  []keptSeries
	// done holds hashes of the names of families already finished; a family
	// seen again means the page is not canonical. A hash collision can only
	// send a page to expfmt, never change a result.
	done    []uint64
	cur     []byte // name of the current family, in page
	curHash uint64
	// state of the current family
	hasHelp, hasType, hasSamples bool
	// label-name sequences already checked for duplicates; the answer does
	// not depend on the page, so it is kept across pages.
	checked [][]byte
	seq     []byte
	strs    map[string]string
	// curMetric is the index in Metrics of the current family, -1 when the
	// family is not kept.
	curMetric  int8
	blocks     []labelBlock
	blockPairs []fastPair
	nextBlock  int
	// blockIndex finds blocks by a hash of their text once there are more
	// than smallBlocks; a collision costs a lookup, never a wrong block.
	blockIndex map[uint64]int32
	scratch    []fastPair
	sampleOf   []int32
	keys       []seriesKey
}

var (
	parserPool = sync.Pool{New: func() any { return new(fastParser) }}
	familySeed = maphash.MakeSeed()
)

// maxPooledKept keeps the parser of an unusually large page out of the pool.
const maxPooledKept = 1 << 16

func (p *fastParser) reset(page []byte) {
	p.page = page
	p.pairs, p.kept, p.done = p.pairs[:0], p.kept[:0], p.done[:0]
	p.cur, p.curHash, p.curMetric = nil, 0, -1
	p.hasHelp, p.hasType, p.hasSamples = false, false, false
	p.blocks, p.blockPairs = p.blocks[:0], p.blockPairs[:0]
	p.nextBlock = 0
	clear(p.blockIndex)
}

// release returns p to the pool without the page, which belongs to the
// caller.
func (p *fastParser) release() {
	if cap(p.kept) > maxPooledKept {
		return
	}
	clear(p.blocks)
	p.page, p.cur, p.strs = nil, nil, nil
	parserPool.Put(p)
}

// parseTextFast parses page if it is in the canonical shape; ok is false
// when the caller must use expfmt.
func parseTextFast(page []byte, at time.Time) (samples []schedloop.GPUSample, err error, ok bool) {
	set, err, ok := parseTextFastSet(page, at)
	if !ok || err != nil {
		return nil, err, ok
	}
	return set.sorted(), nil, true
}

// parseTextFastSet is parseTextFast before sorting.
func parseTextFastSet(page []byte, at time.Time) (set *sampleSet, err error, ok bool) {
	if len(page) > 0 && page[len(page)-1] != '\n' {
		return nil, nil, false
	}
	if len(page) > 1<<30 {
		return nil, nil, false
	}
	p := parserPool.Get().(*fastParser)
	defer p.release()
	p.reset(page)
	for off := 0; off < len(page); {
		end := off + bytes.IndexByte(page[off:], '\n')
		if !p.line(off, end) {
			return nil, nil, false
		}
		off = end + 1
	}
	built := newSampleSet(len(p.kept) / len(Metrics))
	// The keys only serve while the set is built: they are the parser's,
	// and cleared so that the pool holds no strings of this page.
	built.keys = p.keys[:0]
	defer func() {
		clear(built.keys)
		p.keys, built.keys, built.index = built.keys[:0], nil, nil
	}()
	set = built
	// Series of one label block without their own timestamp all land in
	// the same sample: after the first, only the value needs setting.
	p.sampleOf = slices.Grow(p.sampleOf[:0], len(p.blocks))[:len(p.blocks)]
	sampleOf := p.sampleOf
	for i := range sampleOf {
		sampleOf[i] = -1
	}
	var unblocked seriesLabels
	for m := range Metrics {
		for i := range p.kept {
			k := &p.kept[i]
			if int(k.metric) != m {
				continue
			}
			if k.block >= 0 && !k.hasTS && sampleOf[k.block] >= 0 {
				setFieldIndex(&set.samples[sampleOf[k.block]], m, k.value)
				continue
			}
			var labels *seriesLabels
			if k.block >= 0 {
				labels = &p.blockLabels(&p.blocks[k.block]).labels
			} else {
				unblocked = resolveLabels(func(n string) string {
					for _, lp := range p.pairs[k.pairs : k.pairs+k.pairN] {
						if string(page[lp.name.from:lp.name.to]) == n {
							return p.str(page[lp.value.from:lp.value.to])
						}
					}
					return ""
				})
				labels = &unblocked
			}
			t := at
			if k.hasTS {
				t = time.UnixMilli(k.ts)
			}
			idx, err := set.addLabels(m, labels, k.value, t)
			if err != nil {
				return nil, err, true
			}
			if k.block >= 0 && !k.hasTS {
				sampleOf[k.block] = int32(idx)
			}
		}
	}
	return set, nil, true
}

// blockLabels returns a block's labels, validated on this page or an
// earlier one.
func (p *fastParser) blockLabels(b *labelBlock) *knownLabels {
	if b.known == nil {
		b.known = rememberLabels(b.text, p.blockPairs[b.pairs.from:b.pairs.to])
	}
	return b.known
}

// str interns label values: a page repeats each host, pod and UUID dozens of
// times.
func (p *fastParser) str(b []byte) string {
	if p.strs == nil {
		p.strs = map[string]string{}
	}
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
	i := 0
	if c := len(p.cur); c > 0 && len(l) > c && (l[c] == '{' || l[c] == ' ') && bytes.Equal(l[:c], p.cur) {
		if p.curMetric < 0 {
			// A sample of a family the collector does not keep: nothing on
			// it is read, so it is not validated either.
			p.hasSamples = true
			return true
		}
		// The current family's name was validated when it began.
		i = c
	} else {
		i = nameLen(l)
		if i == 0 || i == len(l) {
			return false
		}
		if !p.family(l[:i]) {
			return false
		}
	}
	p.hasSamples = true
	metric := p.curMetric
	block := int32(-1)
	pairStart := int32(len(p.pairs))
	if l[i] == '{' {
		if b := p.knownBlock(l[i:]); b >= 0 {
			block = int32(b)
			i += len(p.blocks[b].text)
		} else {
			// A label set seen on an earlier page ends at the line's last
			// '}': values and timestamps have none.
			var n int
			known := (*knownLabels)(nil)
			if j := bytes.LastIndexByte(l, '}'); j > i {
				if known = lookupLabels(l[i : j+1]); known != nil {
					n = j + 1 - i
					p.scratch = append(p.scratch[:0], known.pairs...)
				}
			}
			if known == nil {
				var ok bool
				if n, ok = p.labels(l[i:]); !ok {
					return false
				}
			}
			if len(p.blocks) < maxBlocks {
				from := int32(len(p.blockPairs))
				p.blockPairs = append(p.blockPairs, p.scratch...)
				p.blocks = append(p.blocks, labelBlock{text: l[i : i+n], pairs: span{from, int32(len(p.blockPairs))}, known: known})
				block = int32(len(p.blocks) - 1)
				p.nextBlock = len(p.blocks) - 1
				p.indexBlocks()
			} else if metric >= 0 {
				for _, lp := range p.scratch {
					base := int32(off + i)
					p.pairs = append(p.pairs, fastPair{name: span{lp.name.from + base, lp.name.to + base},
						value: span{lp.value.from + base, lp.value.to + base}})
				}
			}
			i += n
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
	v, ok := simpleFloat(valTok)
	if !ok {
		if len(valTok) == 0 || bytes.ContainsAny(valTok, "pP_\t") {
			return false
		}
		var err error
		if v, err = strconv.ParseFloat(string(valTok), 64); err != nil {
			return false
		}
	}
	var ts int64
	if hasTS {
		if bytes.IndexByte(tsTok, '\t') >= 0 {
			return false
		}
		var err error
		if ts, err = strconv.ParseInt(string(tsTok), 10, 64); err != nil {
			return false
		}
	}
	if metric >= 0 {
		p.kept = append(p.kept, keptSeries{metric: metric, hasTS: hasTS, value: v, ts: ts, block: block,
			pairs: pairStart, pairN: int32(len(p.pairs)) - pairStart})
	}
	return true
}

// smallBlocks is the number of blocks up to which knownBlock tries them
// all in turn. Beyond it, the first family of a page, whose every line is a
// new block, would try each line against all blocks before it.
const smallBlocks = 16

// knownBlock returns the cached label block that l starts with, -1 if none.
// Families list GPUs in the same order, so the block after the last one
// matched is tried first.
func (p *fastParser) knownBlock(l []byte) int {
	n := len(p.blocks)
	if n == 0 {
		return -1
	}
	if n > smallBlocks {
		if b := (p.nextBlock + 1) % n; bytes.HasPrefix(l, p.blocks[b].text) {
			p.nextBlock = b
			return b
		}
		// A block ends at the line's last '}': values and timestamps have
		// none. On a line that is not canonical this may find nothing
		// where a prefix would have matched; the line is then validated
		// in full instead.
		j := bytes.LastIndexByte(l, '}')
		if j < 0 {
			return -1
		}
		b, ok := p.blockIndex[maphash.Bytes(familySeed, l[:j+1])]
		if !ok || !bytes.Equal(p.blocks[b].text, l[:j+1]) {
			return -1
		}
		p.nextBlock = int(b)
		return int(b)
	}
	for k := range n {
		b := (p.nextBlock + 1 + k) % n
		if bytes.HasPrefix(l, p.blocks[b].text) {
			p.nextBlock = b
			return b
		}
	}
	return -1
}

// indexBlocks adds the block just appended to blockIndex, and all the
// others when the page has just passed smallBlocks.
func (p *fastParser) indexBlocks() {
	n := len(p.blocks)
	if n <= smallBlocks {
		return
	}
	if p.blockIndex == nil {
		p.blockIndex = make(map[uint64]int32, maxBlocks)
	}
	from := n - 1
	if n == smallBlocks+1 {
		from = 0
	}
	for b := from; b < n; b++ {
		h := maphash.Bytes(familySeed, p.blocks[b].text)
		if _, ok := p.blockIndex[h]; !ok {
			p.blockIndex[h] = int32(b)
		}
	}
}

// labels validates the label set at the start of l ('{' ... '}') and leaves
// its pairs in p.scratch, relative to l; n is its length.
func (p *fastParser) labels(l []byte) (n int, ok bool) {
	p.scratch = p.scratch[:0]
	p.seq = p.seq[:0]
	i := 1
	for {
		ns := i
		for i < len(l) && isLabelByte(l[i], i == ns) {
			i++
		}
		if i == ns || i+2 > len(l) || l[i] != '=' || l[i+1] != '"' {
			return 0, false
		}
		if l[ns] == '_' && ns+1 < i && l[ns+1] == '_' {
			return 0, false
		}
		ne := i
		i += 2
		// The value runs to the next quote. A backslash before it is an
		// escape, left to expfmt; other bytes must be valid UTF-8. Values
		// are short, so one loop beats three library scans.
		vs, ascii := i, true
		for ; i < len(l) && l[i] != '"'; i++ {
			if l[i] == '\\' {
				return 0, false
			}
			if l[i] >= utf8.RuneSelf {
				ascii = false
			}
		}
		if i == len(l) || !ascii && !utf8.Valid(l[vs:i]) {
			return 0, false
		}
		p.seq = append(p.seq, l[ns:ne]...)
		p.seq = append(p.seq, 0)
		p.scratch = append(p.scratch, fastPair{name: span{int32(ns), int32(ne)}, value: span{int32(vs), int32(i)}})
		i++
		if i >= len(l) {
			return 0, false
		}
		if l[i] == '}' {
			i++
			break
		}
		if l[i] != ',' {
			return 0, false
		}
		i++
	}
	if !p.uniqueNames() {
		return 0, false
	}
	return i, true
}

// pow10 holds the powers of ten that float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// simpleFloat reads [-]digits[.digits] with at most 15 digits, which is how
// dcgm-exporter prints its values, without allocating. Such a mantissa and
// power of ten are exact in float64 and one IEEE division rounds correctly,
// so the result is bit-for-bit strconv.ParseFloat's. Anything else reports
// false and goes through ParseFloat.
func simpleFloat(b []byte) (float64, bool) {
	i, neg := 0, false
	if len(b) > 0 && b[0] == '-' {
		i, neg = 1, true
	}
	var mant uint64
	digits, frac, dot := 0, 0, false
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= '0' && c <= '9':
			mant = mant*10 + uint64(c-'0')
			digits++
			if dot {
				frac++
			}
		case c == '.' && !dot:
			dot = true
		default:
			return 0, false
		}
	}
	if digits == 0 || digits > 15 {
		return 0, false
	}
	f := float64(mant) / pow10[frac]
	if neg {
		f = -f
	}
	return f, true
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
	// A TYPE line follows its family's HELP line, whose name was checked.
	c := len(p.cur)
	same := c > 0 && len(rest) > c && rest[c] == ' ' && bytes.Equal(rest[:c], p.cur)
	i := c
	if !same {
		i = nameLen(rest)
	}
	if i == 0 || i == len(rest) || rest[i] != ' ' || i+1 == len(rest) {
		return false
	}
	name, text := rest[:i], rest[i+1:]
	if !same && !p.family(name) {
		return false
	}
	if help {
		if p.hasHelp || text[0] == ' ' || text[0] == '\t' || !plainHelp(text) {
			return false
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
	h := maphash.Bytes(familySeed, name)
	if slices.Contains(p.done, h) {
		return false
	}
	if len(p.cur) > 0 {
		p.done = append(p.done, p.curHash)
	}
	p.cur, p.curHash = name, h
	p.hasHelp, p.hasType, p.hasSamples = false, false, false
	p.curMetric = -1
	for m, kept := range Metrics {
		if string(name) == kept {
			p.curMetric = int8(m)
			break
		}
	}
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

// Classes of bytes in metric and label names, looked up rather than
// compared: names are most of what a page's comment lines hold.
const (
	nameFirst  = 1 << iota // may start a metric name
	nameNext               // may continue a metric name
	labelFirst             // may start a label name
	labelNext              // may continue a label name
)

var byteClass = func() (t [256]uint8) {
	for b := range 256 {
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b == '_':
			t[b] = nameFirst | nameNext | labelFirst | labelNext
		case b == ':':
			t[b] = nameFirst | nameNext
		case b >= '0' && b <= '9':
			t[b] = nameNext | labelNext
		}
	}
	return t
}()

// nameLen is the length of the metric name l starts with.
func nameLen(l []byte) int {
	if len(l) == 0 || byteClass[l[0]]&nameFirst == 0 {
		return 0
	}
	i := 1
	for i < len(l) && byteClass[l[i]]&nameNext != 0 {
		i++
	}
	return i
}

func isLabelByte(b byte, first bool) bool {
	if first {
		return byteClass[b]&labelFirst != 0
	}
	return byteClass[b]&labelNext != 0
}

// plainHelp says whether HELP text has no byte that expfmt would read
// differently: non-ASCII, '\r', or an escape. Eight bytes at a time, as
// HELP texts run to dozens of bytes on every family.
func plainHelp(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasZero := func(x uint64) bool { return (x-ones)&^x&highs != 0 }
	for ; len(b) >= 8; b = b[8:] {
		w := binary.LittleEndian.Uint64(b)
		if w&highs != 0 || hasZero(w^(ones*'\r')) || hasZero(w^(ones*'\\')) {
			return false
		}
	}
	for _, c := range b {
		if c >= utf8.RuneSelf || c == '\r' || c == '\\' {
			return false
		}
	}
	return true
}
