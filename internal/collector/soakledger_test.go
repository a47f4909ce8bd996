package collector_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/schedloop/schedloop"
)

// pageLedger follows each page a good exporter's counting proxy serves to
// where it ended: handed to the ingester, or given up on, and why. A page
// served is every GPU's sample of one scrape; the soak's samples served but
// never received add up to the pages given up on.
type pageLedger struct {
	mu      sync.Mutex
	pages   map[int64]*pageFate
	next    int64
	current map[string]int64 // node -> its page the collector is reading or last read
	stopAt  time.Time        // when scraping was stopped
}

// pageFate is what happened to one page.
type pageFate struct {
	node     string
	samples  int64
	servedAt time.Time
	head     bool            // the collector received the answer's head
	read     bool            // and read the body to its end
	closeErr error           // the scrape's context when the body was closed
	scrape   context.Context // the scrape's context (its timeout)
	parsed   bool            // parsed whole: the samples go to the ingester
	parsedAt time.Time
}

func newPageLedger() *pageLedger {
	return &pageLedger{pages: map[int64]*pageFate{}, current: map[string]int64{}}
}

// pageHeader carries a page's ledger id from the proxy to the collector's
// transport.
const pageHeader = "X-Soak-Page"

// served records a page the proxy read from node's exporter and returns its id.
func (l *pageLedger) served(node string, samples int64) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	l.pages[l.next] = &pageFate{node: node, samples: samples, servedAt: time.Now()}
	return strconv.FormatInt(l.next, 10)
}

// transport wraps the collector's scrape transport, marking each page's
// head and body as they reach the collector.
func (l *pageLedger) transport(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		id, perr := strconv.ParseInt(resp.Header.Get(pageHeader), 10, 64)
		if perr != nil {
			return resp, nil // a hostile target
		}
		l.mu.Lock()
		if p := l.pages[id]; p != nil {
			p.head, p.scrape = true, req.Context()
			l.current[p.node] = id
		}
		l.mu.Unlock()
		resp.Body = &ledgerBody{ReadCloser: resp.Body, l: l, id: id, ctx: req.Context()}
		return resp, nil
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type ledgerBody struct {
	io.ReadCloser
	l   *pageLedger
	id  int64
	ctx context.Context
	eof bool
}

func (b *ledgerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *ledgerBody) Close() error {
	b.l.mu.Lock()
	if p := b.l.pages[b.id]; p != nil {
		p.read, p.closeErr = b.eof, b.ctx.Err()
	}
	b.l.mu.Unlock()
	return b.ReadCloser.Close()
}

// parsedWhole is the scraper's inventory hook: called once per page parsed
// whole, just before its samples go to the ingester.
func (l *pageLedger) parsedWhole(gpus []schedloop.GPU) {
	if len(gpus) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.pages[l.current[gpus[0].Node]]; p != nil && p.head {
		p.parsed, p.parsedAt = true, time.Now()
	}
}

func (l *pageLedger) stopping() {
	l.mu.Lock()
	l.stopAt = time.Now()
	l.mu.Unlock()
}

// Causes of a page given up on, as the soak reports them.
const (
	lostBeforeHead = "scrape timeout before the answer's head"
	lostReading    = "scrape timeout mid-body"
	lostParsing    = "scrape timeout mid-parse"
	lostReadError  = "connection error mid-body"
	lostRefused    = "page refused by the parser"
	lostAtStop     = "in flight when scraping stopped"
)

// fates sums the samples of the pages given up on by cause, and those
// parsed whole (which the ingester received).
func (l *pageLedger) fates() (lost map[string]int64, lostPages map[string]int64, parsed int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lost, lostPages = map[string]int64{}, map[string]int64{}
	for _, p := range l.pages {
		stopped := !l.stopAt.IsZero()
		cause := ""
		switch {
		case p.parsed && stopped && p.parsedAt.After(l.stopAt):
			// The scrape loop drops a page parsed after its context
			// ended (Run's contract), as it does at a collector's exit.
			cause = lostAtStop
		case p.parsed:
			parsed += p.samples
			continue
		case !p.head && stopped && p.servedAt.After(l.stopAt):
			cause = lostAtStop
		case !p.head:
			cause = lostBeforeHead
		case !p.read && errors.Is(p.closeErr, context.DeadlineExceeded):
			cause = lostReading
		case !p.read && p.closeErr != nil:
			cause = lostAtStop
		case !p.read:
			cause = lostReadError
		case errors.Is(p.scrape.Err(), context.DeadlineExceeded):
			cause = lostParsing
		case stopped && p.servedAt.After(l.stopAt.Add(-soakScrape)):
			cause = lostAtStop
		default:
			cause = lostRefused
		}
		lost[cause] += p.samples
		lostPages[cause]++
	}
	return lost, lostPages, parsed
}

// report is one line per cause, largest first.
func (l *pageLedger) report() []string {
	lost, pages, _ := l.fates()
	var causes []string
	for c := range lost {
		causes = append(causes, c)
	}
	sort.Slice(causes, func(i, j int) bool { return lost[causes[i]] > lost[causes[j]] })
	var out []string
	for _, c := range causes {
		out = append(out, fmt.Sprintf("%s: %d samples in %d pages", c, lost[c], pages[c]))
	}
	return out
}
