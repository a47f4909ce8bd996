package dcgm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
)

// goldenLimit is the body limit of the golden cases, small enough for a
// case to exceed it.
const goldenLimit = 4096

// responseOutcome is what a golden file records for one raw response.
type responseOutcome struct {
	Status      int    `json:"status,omitempty"`
	StatusLine  string `json:"status_line,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	KeepAlive   bool   `json:"keep_alive"`
	Body        string `json:"body,omitempty"`
	UseNetHTTP  bool   `json:"use_net_http,omitempty"`
	Error       string `json:"error,omitempty"`
}

// trickle hands out its bytes a few at a time, as a connection may when a
// response arrives in pieces, so that every line and chunk of a response is
// at some point read partly.
type trickle struct {
	rest []byte
	n    int
}

func (t *trickle) Read(p []byte) (int, error) {
	if len(t.rest) == 0 {
		return 0, io.EOF
	}
	t.n = t.n%7 + 1 // 1, 2, ..., 7 bytes, over and over
	n := copy(p[:min(len(p), t.n)], t.rest)
	t.rest = t.rest[n:]
	return n, nil
}

// testResponseReader reads raw as the page client reads a connection, in
// pieces of a few bytes.
func testResponseReader(raw []byte) *responseReader {
	return &responseReader{conn: &trickle{rest: raw}}
}

func readOutcome(raw []byte) responseOutcome {
	return readOutcomeFrom(testResponseReader(raw))
}

// readOutcomeWhole reads raw as a response that arrived in full before the
// first read.
func readOutcomeWhole(raw []byte) responseOutcome {
	return readOutcomeFrom(&responseReader{conn: bytes.NewReader(raw)})
}

func readOutcomeFrom(r *responseReader) responseOutcome {
	head, body, err := readResponse(r, goldenLimit)
	out := responseOutcome{Status: head.status, StatusLine: head.statusLine, ContentType: head.contentType, KeepAlive: head.keepAlive}
	switch {
	case errors.Is(err, errUseNetHTTP):
		out.UseNetHTTP = true
		out.KeepAlive = false // the connection is closed and the request sent again through net/http
	case err != nil:
		out.Error = err.Error()
		out.KeepAlive = false
	default:
		out.Body = string(body)
	}
	return out
}

// TestReadResponseGolden reads each raw response under testdata/http as the
// page client does and compares status, framing and body with its golden
// file.
func TestReadResponseGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "http", "*.http"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no raw responses under testdata/http (%v)", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".http")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got := readOutcome(raw)
			checkGolden(t, strings.TrimSuffix(f, ".http")+".golden.json", got)
			if whole := readOutcomeWhole(raw); whole != got {
				t.Errorf("read in one piece: %+v\nread a few bytes at a time: %+v", whole, got)
			}
		})
	}
}

// FuzzReadResponse holds the page client's reader to net/http's: whenever
// both accept a response, they agree on its status and body. The reader may
// refuse what net/http accepts (the scrape then fails or goes through
// net/http), never read the same bytes differently.
func FuzzReadResponse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "http", "*.http"))
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		// Where a read ends must not change what is read.
		if whole, pieces := readOutcomeWhole(raw), readOutcome(raw); whole != pieces {
			t.Fatalf("read in one piece: %+v\nread a few bytes at a time: %+v", whole, pieces)
		}
		head, body, err := readResponse(testResponseReader(raw), goldenLimit)
		if err != nil {
			return
		}
		if int64(len(body)) > goldenLimit {
			t.Fatalf("body of %d bytes over the %d limit", len(body), goldenLimit)
		}
		br := bufio.NewReader(bytes.NewReader(raw))
		var resp *http.Response
		for {
			resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodGet})
			if err != nil {
				return
			}
			if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
				break
			}
		}
		theirs, err := io.ReadAll(resp.Body)
		if err != nil {
			return
		}
		if resp.StatusCode != head.status {
			t.Fatalf("status %d, net/http reads %d", head.status, resp.StatusCode)
		}
		if head.status != http.StatusOK {
			return
		}
		if head.contentEncoding == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(theirs))
			if err != nil {
				t.Fatalf("gunzipped a body net/http's bytes do not gunzip: %v", err)
			}
			if theirs, err = io.ReadAll(zr); err != nil {
				t.Fatalf("gunzipped a body net/http's bytes do not gunzip: %v", err)
			}
		}
		if !bytes.Equal(body, theirs) {
			t.Fatalf("body %q, net/http reads %q", body, theirs)
		}
	})
}

// pageServer counts the connections a test server accepts.
func pageServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func fetchPage(t *testing.T, c *pageClient, rawURL string) (pageResponse, []byte, error) {
	t.Helper()
	tg, err := c.target(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	if !tg.direct {
		t.Fatalf("target %s: want it fetched by the page client", rawURL)
	}
	return c.get(context.Background(), time.Now().Add(5*time.Second), tg, new([]byte), DefaultMaxBodyBytes)
}

func TestPageClientKeepsOneConnectionPerExporter(t *testing.T) {
	page := exporterPage(8)
	var auth atomic.Value
	srv, conns := pageServer(t, func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write(page)
	})
	c := &pageClient{}
	defer c.closeIdle()
	u := strings.Replace(srv.URL, "http://", "http://scraper:s3cret@", 1) + "/metrics?collect=dcgm"
	for range 5 {
		resp, body, err := fetchPage(t, c, u)
		if err != nil {
			t.Fatal(err)
		}
		if resp.status != http.StatusOK || !bytes.Equal(body, page) {
			t.Fatalf("status %d, %d-byte body; want 200 and the %d-byte page", resp.status, len(body), len(page))
		}
		if resp.format.FormatType() != expfmt.TypeTextPlain {
			t.Errorf("format %q, want text", resp.format)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 scrapes opened %d connections, want 1 kept alive", n)
	}
	if got := auth.Load(); got != "Basic c2NyYXBlcjpzM2NyZXQ=" {
		t.Errorf("Authorization %q, want basic auth from the URL's user info", got)
	}
}

// oneResponsePerConnection answers one request per connection, then closes
// it without saying so, as a server does when a kept-alive connection has
// been idle past its timeout.
func oneResponsePerConnection(t *testing.T, page []byte) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			br := bufio.NewReader(c)
			for {
				line, err := br.ReadString('\n')
				if err != nil || line == "\r\n" {
					break
				}
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n\r\n", len(page))
			c.Write(page)
			c.Close()
		}
	})
	return "http://" + ln.Addr().String() + "/metrics", &accepted
}

func TestPageClientRetriesAConnectionClosedWhileIdle(t *testing.T) {
	page := exporterPage(8)
	u, accepted := oneResponsePerConnection(t, page)
	c := &pageClient{}
	defer c.closeIdle()
	for i := range 3 {
		_, body, err := fetchPage(t, c, u)
		if err != nil {
			t.Fatalf("scrape %d: %v (a kept-alive connection the server closed must be replaced, not fail the scrape)", i, err)
		}
		if !bytes.Equal(body, page) {
			t.Fatalf("scrape %d: %d-byte body, want the %d-byte page", i, len(body), len(page))
		}
	}
	if n := accepted.Load(); n != 3 {
		t.Errorf("server accepted %d connections, want 3 (one per scrape)", n)
	}
}

func TestPageClientClosesConnectionsIdleTooLong(t *testing.T) {
	page := exporterPage(1)
	srv, _ := pageServer(t, func(w http.ResponseWriter, r *http.Request) { w.Write(page) })
	c := &pageClient{}
	defer c.closeIdle()
	if _, _, err := fetchPage(t, c, srv.URL+"/metrics"); err != nil {
		t.Fatal(err)
	}
	tg, _ := c.target(srv.URL + "/metrics")
	old := tg.idle.Load()
	if old == nil {
		t.Fatal("no connection kept after the scrape")
	}
	old.lastUsed = time.Now().Add(-2 * idleTimeout)
	c.lastSweep.Store(0)
	// A scrape of another exporter triggers the sweep.
	other, _ := pageServer(t, func(w http.ResponseWriter, r *http.Request) { w.Write(page) })
	if _, _, err := fetchPage(t, c, other.URL+"/metrics"); err != nil {
		t.Fatal(err)
	}
	if tg.idle.Load() != nil {
		t.Error("the first exporter's stale connection is still kept")
	}
	if _, err := old.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err == nil {
		t.Error("the stale connection is still open")
	}
}

// TestScrapeFallsBackToNetHTTP: what the page client does not handle is
// fetched through net/http, which follows the redirect.
func TestScrapeFallsBackToNetHTTP(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("testdata", "exporter", "a100-8gpu.prom"))
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := pageServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			http.Redirect(w, r, "/metrics/", http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(page)
	})
	s := &ExporterScraper{Targets: StaticTargets{srv.URL + "/metrics"}, Now: func() time.Time { return scrapeTime }}
	samples, err := s.Collect(context.Background())
	if err != nil || len(samples) != 8 {
		t.Fatalf("got %d samples, err %v; want the 8 GPUs of the page behind the redirect", len(samples), err)
	}
}

func TestPageTargets(t *testing.T) {
	c := &pageClient{}
	for _, tt := range []struct {
		url      string
		direct   bool
		hostport string
		request  string
	}{
		{"http://10.0.0.7:9400/metrics", true, "10.0.0.7:9400", "GET /metrics HTTP/1.1\r\nHost: 10.0.0.7:9400\r\n"},
		{"http://exporter.gpu.svc/metrics", true, "exporter.gpu.svc:80", "GET /metrics HTTP/1.1\r\nHost: exporter.gpu.svc\r\n"},
		{"http://[fd00::7]:9400", true, "[fd00::7]:9400", "GET / HTTP/1.1\r\nHost: [fd00::7]:9400\r\n"},
		{"https://10.0.0.7:9400/metrics", false, "", ""},
		{"unix:///run/exporter.sock", false, "", ""},
	} {
		tg, err := c.target(tt.url)
		if err != nil {
			t.Fatalf("%s: %v", tt.url, err)
		}
		if tg.direct != tt.direct || tg.hostport != tt.hostport || !strings.HasPrefix(string(tg.request), tt.request) {
			t.Errorf("%s: direct %v, %q, request %q; want %v, %q, request starting %q",
				tt.url, tg.direct, tg.hostport, tg.request, tt.direct, tt.hostport, tt.request)
		}
	}
	if _, err := c.target("http://[::1"); err == nil {
		t.Error("a malformed URL was accepted")
	}
}

func TestResponseHeadLimit(t *testing.T) {
	long := "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", 100_000) + "\r\nContent-Length: 2\r\n\r\nok"
	if o := readOutcome([]byte(long)); o.Error != "" || o.Body != "ok" {
		t.Errorf("a 100 KB header line: %+v, want it read (net/http takes up to 1 MB of headers)", o)
	}
	huge := "HTTP/1.1 200 OK\r\nX-Huge: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n"
	if o := readOutcome([]byte(huge)); !strings.Contains(o.Error, "head exceeds 1048576 bytes") {
		t.Errorf("a head over 1 MB: %+v, want it refused", o)
	}
}

// TestResponseReadInPlace: a response that is all there when read takes one
// read, and its body is the bytes where they landed in the page buffer.
func TestResponseReadInPlace(t *testing.T) {
	page := exporterPage(8)
	raw := fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(page), page)
	src := &countingReader{r: bytes.NewReader(raw)}
	buf := make([]byte, 0, 2*len(raw))
	r := &responseReader{conn: src}
	r.start(buf)
	_, body, err := readResponse(r, DefaultMaxBodyBytes)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, page) {
		t.Fatalf("%d-byte body, want the %d-byte page", len(body), len(page))
	}
	if src.reads != 1 {
		t.Errorf("%d reads, want 1", src.reads)
	}
	if r.pending() {
		t.Error("bytes left over after the response")
	}
	if kept := r.release(); &kept[:1][0] != &buf[:1][0] || &body[0] != &buf[:len(raw)][len(raw)-len(page)-len("\r\n0\r\n\r\n")] {
		t.Error("the body was copied out of the page buffer")
	}
}

type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// TestPageClientDropsConnectionWithBytesPastTheResponse: bytes the server
// sent after a response are not the start of the next one, so the
// connection is not used again.
func TestPageClientDropsConnectionWithBytesPastTheResponse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if line == "\r\n" {
						c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n"))
					}
				}
			}()
		}
	}()
	c := &pageClient{}
	defer c.closeIdle()
	for i := range 2 {
		_, body, err := fetchPage(t, c, "http://"+ln.Addr().String()+"/metrics")
		if err != nil || string(body) != "ok" {
			t.Fatalf("scrape %d: body %q, %v", i, body, err)
		}
	}
	if n := accepted.Load(); n != 2 {
		t.Errorf("server accepted %d connections, want 2 (none kept after extra bytes)", n)
	}
}
