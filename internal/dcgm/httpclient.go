package dcgm

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
)

// pageClient fetches exporter pages from plain-HTTP targets over kept-alive
// HTTP/1.1 connections of its own.
//
// An exporter page holds one node's GPUs, eight samples on a typical node,
// so whatever a request costs is paid once per eight samples. net/http's
// transport spends most of a scrape's client-side CPU outside the system
// calls: a request and header maps per scrape, a cancel context, and
// handoffs between the caller and the connection's reader and writer
// goroutines. pageClient writes a request prebuilt per target and reads the
// response on the calling goroutine, with three system calls or so per
// scrape.
//
// It speaks the part of HTTP/1.1 that metrics endpoints use: GET, a status
// line, headers, and a body framed by Content-Length, chunked encoding or the
// end of the connection. Targets behind a proxy from the environment, and
// responses it does not handle (a redirect, 101, an unknown transfer or
// content coding), go to net/http, so they behave as before; https targets
// and scrapers with a Client of their own never come here.
type pageClient struct {
	dialer net.Dialer

	// targets is read by every scrape and written once per target: a
	// sync.Map reads it without a lock, which concurrent scrapes otherwise
	// queue on.
	targets    sync.Map // URL → *pageTarget
	numTargets atomic.Int64
	// lastSweep is when idle connections were last checked, in Unix ns.
	lastSweep atomic.Int64
}

// Limits of pageClient.
const (
	// idleTimeout closes connections of targets that are no longer
	// scraped (an exporter pod that moved away), like net/http's
	// IdleConnTimeout of the default transport.
	idleTimeout = 90 * time.Second
	// maxHeaderBytes bounds a response's status line and headers, as
	// net/http's client does by default.
	maxHeaderBytes = 1 << 20
	// maxErrorBody is read from a non-200 response to keep its connection;
	// a longer one closes it instead.
	maxErrorBody = 64 << 10
	// maxChunkLine bounds a chunk's size line, extensions included, as
	// net/http does.
	maxChunkLine = 4096
	// maxTargets bounds the per-target cache; when full it starts over.
	maxTargets = 1 << 16
	// minReadBuffer is the least room a response is read into: an 8-GPU
	// node's page with dcgm-exporter's default counters (~45 KB) fits whole.
	minReadBuffer = 64 << 10
)

// pageTarget is what a target URL needs, worked out once: whether pageClient
// may fetch it at all, the connection key, and the request bytes.
type pageTarget struct {
	direct   bool
	hostport string
	request  []byte
	// idle is the connection kept between scrapes: a round scrapes each
	// target once, so one is enough.
	idle atomic.Pointer[pageConn]
}

// pageConn is one kept-alive connection. It keeps no bytes between
// responses: each is read into the page buffer of the scrape that asked.
type pageConn struct {
	net.Conn
	r        responseReader
	lastUsed time.Time
	// The format of the last Content-Type seen: an exporter answers with
	// the same one every time, and parsing it costs a map.
	lastType   string
	lastFormat expfmt.Format
}

// pageResponse is a fetched response: its status and the format of its body.
type pageResponse struct {
	status     int
	statusLine string // "503 Service Unavailable"
	format     expfmt.Format
}

// errUseNetHTTP says the response needs what pageClient does not do; the
// caller sends the request again through net/http.
var errUseNetHTTP = errors.New("response needs net/http")

// errStaleConn is a kept-alive connection the server had closed before the
// request reached it; the request is safe to send again on a new one.
var errStaleConn = errors.New("kept-alive connection closed by the server")

var defaultPageClient = &pageClient{}

// target returns the cached facts about rawURL.
func (c *pageClient) target(rawURL string) (*pageTarget, error) {
	if t, ok := c.targets.Load(rawURL); ok {
		return t.(*pageTarget), nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	t := &pageTarget{}
	if u.Scheme == "http" && u.Host != "" {
		// ProxyFromEnvironment reads the environment once per process, so
		// its answer for a URL does not change and can be kept.
		proxy, err := http.ProxyFromEnvironment(&http.Request{URL: u})
		t.direct = err == nil && proxy == nil
	}
	if t.direct {
		port := u.Port()
		if port == "" {
			port = "80"
		}
		t.hostport = net.JoinHostPort(u.Hostname(), port)
		t.request = buildRequest(u)
	}
	if c.numTargets.Add(1) > maxTargets {
		c.closeIdle()
		c.targets.Clear()
		c.numTargets.Store(1)
	}
	c.targets.Store(rawURL, t)
	return t, nil
}

// buildRequest is the GET for u, with what net/http would send but the
// Accept-Encoding: on a cluster network the page is cheaper to send whole
// than to compress and decompress.
func buildRequest(u *url.URL) []byte {
	uri := u.RequestURI()
	var b bytes.Buffer
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: schedloop-collector\r\nAccept: %s\r\n", uri, u.Host, acceptHeader)
	if u.User != nil {
		pass, _ := u.User.Password()
		fmt.Fprintf(&b, "Authorization: Basic %s\r\n", base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass)))
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// get fetches t and returns the response and its body. The response is read
// into *buf, which get may grow and leaves for the caller to reuse once the
// body is no longer needed; the body is part of it. A non-200 status is a
// response, not an error.
func (c *pageClient) get(ctx context.Context, deadline time.Time, t *pageTarget, buf *[]byte, limit int64) (pageResponse, []byte, error) {
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for attempt := 0; ; attempt++ {
		conn, reused := t.idle.Swap(nil), true
		if conn == nil {
			nc, err := c.dial(ctx, deadline, t.hostport)
			if err != nil {
				return pageResponse{}, nil, err
			}
			conn, reused = &pageConn{Conn: nc, r: responseReader{conn: nc}}, false
		}
		resp, out, keep, err := c.roundTrip(ctx, deadline, conn, reused, t.request, buf, limit)
		if err == nil && keep {
			c.put(t, conn)
		} else {
			conn.Close()
		}
		if errors.Is(err, errStaleConn) && attempt == 0 {
			continue
		}
		return resp, out, err
	}
}

// dial connects to hostport by the scrape's deadline.
func (c *pageClient) dial(ctx context.Context, deadline time.Time, hostport string) (net.Conn, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return c.dialer.DialContext(ctx, "tcp", hostport)
}

// put keeps conn for t's next scrape, and now and then closes connections
// idle for longer than idleTimeout.
func (c *pageClient) put(t *pageTarget, conn *pageConn) {
	now := time.Now()
	conn.lastUsed = now
	if !t.idle.CompareAndSwap(nil, conn) {
		conn.Close()
	}
	last := c.lastSweep.Load()
	if now.UnixNano()-last < int64(idleTimeout/3) || !c.lastSweep.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	c.targets.Range(func(_, v any) bool {
		t := v.(*pageTarget)
		if ic := t.idle.Load(); ic != nil && now.Sub(ic.lastUsed) > idleTimeout && t.idle.CompareAndSwap(ic, nil) {
			ic.Close()
		}
		return true
	})
}

// closeIdle closes every kept connection.
func (c *pageClient) closeIdle() {
	c.targets.Range(func(_, v any) bool {
		if ic := v.(*pageTarget).idle.Swap(nil); ic != nil {
			ic.Close()
		}
		return true
	})
}

// roundTrip sends request on conn and reads the response into *buf by
// deadline. keep says the connection can serve another request.
func (c *pageClient) roundTrip(ctx context.Context, deadline time.Time, conn *pageConn, reused bool, request []byte, buf *[]byte, limit int64) (resp pageResponse, out []byte, keep bool, err error) {
	if err := conn.SetDeadline(deadline); err != nil {
		return resp, nil, false, err
	}
	conn.r.start(*buf)
	defer func() { *buf = conn.r.release() }()
	// A cancelled context interrupts a blocked read or write by moving the
	// deadline into the past.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		fired := !stop()
		if fired {
			keep = false
		}
		// The connection's deadline is the scrape's (or the context's,
		// which may pass a moment before the context says so).
		if err != nil && (fired || errors.Is(err, os.ErrDeadlineExceeded)) {
			cause := context.Cause(ctx)
			if cause == nil {
				cause = context.DeadlineExceeded
			}
			err = fmt.Errorf("%w (%v)", cause, err)
		}
	}()
	if _, err := conn.Write(request); err != nil {
		if reused && isStale(err) {
			return resp, nil, false, errStaleConn
		}
		return resp, nil, false, err
	}
	if reused {
		// Nothing of the response is read yet: an EOF or reset here is a
		// connection the server closed while it sat idle.
		if err := conn.r.fill(); err != nil {
			if isStale(err) {
				return resp, nil, false, errStaleConn
			}
			return resp, nil, false, err
		}
	}
	head, out, err := readResponse(&conn.r, limit)
	if err != nil {
		return resp, nil, false, err
	}
	if conn.r.pending() {
		// Bytes past the response were not asked for: the connection no
		// longer says where the next response begins.
		head.keepAlive = false
	}
	resp.status, resp.statusLine = head.status, head.statusLine
	if head.contentType != conn.lastType || conn.lastFormat == "" {
		conn.lastType = head.contentType
		conn.lastFormat = expfmt.ResponseFormat(http.Header{"Content-Type": {head.contentType}})
	}
	resp.format = conn.lastFormat
	return resp, out, head.keepAlive, nil
}

// readResponse reads one response: its head, and its body when the status
// is 200 (other statuses' bodies are read and dropped, so the connection
// stays usable, up to maxErrorBody). The body is in r's buffer.
func readResponse(r *responseReader, limit int64) (responseHead, []byte, error) {
	head, err := readResponseHead(r)
	if err != nil {
		return head, nil, err
	}
	if head.status != http.StatusOK {
		_, err := readBody(r, head, maxErrorBody)
		head.keepAlive = head.keepAlive && err == nil
		return head, nil, nil
	}
	out, err := readBody(r, head, limit)
	if err != nil {
		return head, nil, err
	}
	if head.contentEncoding == "gzip" {
		// Not asked for, but a server may send it anyway.
		if out, err = gunzip(out, limit); err != nil {
			return head, nil, err
		}
	}
	return head, out, nil
}

func isStale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// errBodyTooLarge is a body over the scraper's limit.
type errBodyTooLarge struct{ limit int64 }

func (e errBodyTooLarge) Error() string { return fmt.Sprintf("body exceeds %d bytes", e.limit) }

func gunzip(page []byte, limit int64) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(page))
	if err != nil {
		return nil, fmt.Errorf("read gzip body: %w", err)
	}
	var out bytes.Buffer
	if _, err := out.ReadFrom(io.LimitReader(zr, limit+1)); err != nil {
		return nil, fmt.Errorf("read gzip body: %w", err)
	}
	if int64(out.Len()) > limit {
		return nil, errBodyTooLarge{limit}
	}
	return out.Bytes(), nil
}

// responseHead is what the status line and headers say.
type responseHead struct {
	status          int
	statusLine      string
	contentType     string
	contentEncoding string
	// contentLength is -1 when absent.
	contentLength int64
	chunked       bool
	// noBody: 204 and 304 carry none whatever the headers say.
	noBody    bool
	keepAlive bool
}

// readResponseHead reads the status line and headers, skipping interim 1xx
// responses.
func readResponseHead(br *responseReader) (responseHead, error) {
	for {
		h, err := readOneHead(br)
		if err != nil {
			return h, err
		}
		if h.status >= 100 && h.status < 200 {
			if h.status == http.StatusSwitchingProtocols {
				return h, errUseNetHTTP
			}
			continue
		}
		return h, nil
	}
}

func readOneHead(br *responseReader) (responseHead, error) {
	h := responseHead{contentLength: -1}
	read := 0
	line, err := readHeadLine(br, &read)
	if err != nil {
		return h, err
	}
	// "HTTP/1.1 200 OK": the version, a space, three digits, and an
	// optional reason.
	if len(line) < len("HTTP/1.x 200") || string(line[:7]) != "HTTP/1." || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return h, fmt.Errorf("malformed HTTP status line %q", truncate(line))
	}
	minor := line[7]
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil || code < 100 || minor < '0' || minor > '9' {
		return h, fmt.Errorf("malformed HTTP status line %q", truncate(line))
	}
	h.status = code
	h.statusLine = string(line[9:])
	h.keepAlive = minor >= '1'
	if code >= 300 && code < 400 && code != http.StatusNotModified {
		return h, errUseNetHTTP
	}
	h.noBody = code == http.StatusNoContent || code == http.StatusNotModified || code < 200
	var transferEncoding string
	for {
		line, err := readHeadLine(br, &read)
		if err != nil {
			return h, err
		}
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || line[0] == ' ' || line[0] == '\t' {
			return h, fmt.Errorf("malformed HTTP header line %q", truncate(line))
		}
		name, value := line[:colon], bytes.Trim(line[colon+1:], " \t")
		if !validHeaderName(name) || !validHeaderValue(value) {
			return h, fmt.Errorf("malformed HTTP header line %q", truncate(line))
		}
		switch {
		case asciiEqualFold(name, "Content-Length"):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 || value[0] == '+' {
				return h, fmt.Errorf("bad Content-Length %q", truncate(value))
			}
			if h.contentLength >= 0 && h.contentLength != n {
				return h, fmt.Errorf("conflicting Content-Length headers %d and %d", h.contentLength, n)
			}
			h.contentLength = n
		case asciiEqualFold(name, "Transfer-Encoding"):
			if transferEncoding != "" {
				return h, errUseNetHTTP
			}
			transferEncoding = string(value)
		case asciiEqualFold(name, "Connection"):
			for tok := range bytes.SplitSeq(value, []byte(",")) {
				tok = bytes.Trim(tok, " \t")
				if asciiEqualFold(tok, "close") {
					h.keepAlive = false
				} else if asciiEqualFold(tok, "keep-alive") && minor == '0' {
					h.keepAlive = true
				}
			}
		case asciiEqualFold(name, "Content-Type"):
			h.contentType = string(value)
		case asciiEqualFold(name, "Content-Encoding"):
			switch {
			case len(value) == 0 || asciiEqualFold(value, "identity"):
			case asciiEqualFold(value, "gzip"):
				h.contentEncoding = "gzip"
			default:
				return h, errUseNetHTTP
			}
		}
	}
	switch {
	case transferEncoding == "":
	case asciiEqualFold([]byte(transferEncoding), "chunked") && minor >= '1':
		h.chunked = true
		// Chunked framing wins over a length (RFC 9112 6.3).
		h.contentLength = -1
	default:
		return h, errUseNetHTTP
	}
	if !h.noBody && !h.chunked && h.contentLength < 0 {
		// The body ends with the connection.
		h.keepAlive = false
	}
	return h, nil
}

// readHeadLine reads one line of the head without its CRLF (or bare LF),
// counting bytes against maxHeaderBytes.
func readHeadLine(r *responseReader, read *int) ([]byte, error) {
	scanned := 0
	for {
		if i := bytes.IndexByte(r.buf[r.pos+scanned:], '\n'); i >= 0 {
			line := r.buf[r.pos : r.pos+scanned+i+1]
			r.pos += len(line)
			if *read += len(line); *read > maxHeaderBytes {
				return nil, fmt.Errorf("HTTP response head exceeds %d bytes", maxHeaderBytes)
			}
			line = line[:len(line)-1]
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			return line, nil
		}
		scanned = len(r.buf) - r.pos
		if *read+scanned > maxHeaderBytes {
			return nil, fmt.Errorf("HTTP response head exceeds %d bytes", maxHeaderBytes)
		}
		if err := r.fill(); err != nil {
			if errors.Is(err, io.EOF) && *read+scanned > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// readBody reads the body the head announces, up to limit bytes.
func readBody(r *responseReader, h responseHead, limit int64) ([]byte, error) {
	switch {
	case h.noBody:
		return nil, nil
	case h.chunked:
		return readChunked(r, limit)
	case h.contentLength >= 0:
		if h.contentLength > limit {
			return nil, errBodyTooLarge{limit}
		}
		return readFull(r, int(h.contentLength))
	default:
		return readToEOF(r, limit)
	}
}

// responseReader reads responses from a connection into one buffer, the
// page buffer of the scrape: the head is parsed where it landed and the body
// is left in place, so a page is copied once, out of the kernel, with as
// few reads as its arrival allows (one, when the whole response is there).
// The buffer is the caller's between start and release.
type responseReader struct {
	conn io.Reader
	// buf holds the bytes read so far; its spare capacity is where the
	// next read lands. pos is the first byte not yet consumed.
	buf []byte
	pos int
}

// start makes buf, emptied, the buffer the next response is read into.
func (r *responseReader) start(buf []byte) { r.buf, r.pos = buf[:0], 0 }

// release hands the buffer, possibly grown, back to the caller.
func (r *responseReader) release() []byte {
	b := r.buf[:0]
	r.buf, r.pos = nil, 0
	return b
}

// pending says bytes were read past what has been consumed.
func (r *responseReader) pending() bool { return r.pos < len(r.buf) }

// fill reads once more from the connection, growing the buffer when it is
// full. Data comes first: an error that came with data is returned by the
// next call.
func (r *responseReader) fill() error {
	if len(r.buf) == cap(r.buf) {
		r.grow(max(cap(r.buf), minReadBuffer))
	}
	for range 100 {
		n, err := r.conn.Read(r.buf[len(r.buf):cap(r.buf)])
		r.buf = r.buf[:len(r.buf)+n]
		if n > 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// grow makes room for n more bytes after those read.
func (r *responseReader) grow(n int) {
	if cap(r.buf)-len(r.buf) >= n {
		return
	}
	nb := make([]byte, len(r.buf), len(r.buf)+n)
	copy(nb, r.buf)
	r.buf = nb
}

// need reads until n unconsumed bytes are buffered.
func (r *responseReader) need(n int) error {
	if missing := r.pos + n - len(r.buf); missing > 0 {
		r.grow(missing)
	}
	for len(r.buf)-r.pos < n {
		if err := r.fill(); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// readFull consumes exactly n bytes.
func readFull(r *responseReader, n int) ([]byte, error) {
	if err := r.need(n); err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	body := r.buf[r.pos : r.pos+n : r.pos+n]
	r.pos += n
	return body, nil
}

func readToEOF(r *responseReader, limit int64) ([]byte, error) {
	from := r.pos
	for {
		if int64(len(r.buf)-from) > limit {
			return nil, errBodyTooLarge{limit}
		}
		err := r.fill()
		if errors.Is(err, io.EOF) {
			r.pos = len(r.buf)
			return r.buf[from:r.pos:r.pos], nil
		}
		if err != nil {
			return nil, fmt.Errorf("read body: %w", err)
		}
	}
}

// readChunked decodes a chunked body, then reads and ignores trailers. The
// first chunk stays where it was read and later ones are moved up to it,
// so the usual single-chunk page is not moved at all.
func readChunked(r *responseReader, limit int64) ([]byte, error) {
	from, to := -1, -1
	read := 0
	for {
		line, err := readHeadLine(r, &read)
		if err != nil {
			return nil, fmt.Errorf("read chunk size: %w", err)
		}
		if len(line) >= maxChunkLine {
			return nil, fmt.Errorf("chunk size line exceeds %d bytes", maxChunkLine)
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // chunk extensions carry nothing a page needs
		}
		line = bytes.TrimRight(line, " \t")
		size, err := strconv.ParseUint(string(line), 16, 63)
		if err != nil || len(line) == 0 {
			return nil, fmt.Errorf("malformed chunk size %q", truncate(line))
		}
		if size == 0 {
			break
		}
		if from < 0 {
			from, to = r.pos, r.pos
		}
		if int64(to-from)+int64(size) > limit {
			return nil, errBodyTooLarge{limit}
		}
		if err := r.need(int(size)); err != nil {
			return nil, fmt.Errorf("read body: %w", err)
		}
		if to != r.pos {
			copy(r.buf[to:], r.buf[r.pos:r.pos+int(size)])
		}
		to += int(size)
		r.pos += int(size)
		crlf, err := readHeadLine(r, &read)
		if err != nil {
			return nil, fmt.Errorf("read chunk end: %w", err)
		}
		if len(crlf) != 0 {
			return nil, errors.New("malformed chunked body: chunk data longer than its size")
		}
		read = 0
	}
	for read = 0; ; {
		line, err := readHeadLine(r, &read)
		if err != nil {
			return nil, fmt.Errorf("read trailers: %w", err)
		}
		if len(line) == 0 {
			break
		}
	}
	if from < 0 {
		return nil, nil
	}
	return r.buf[from:to:to], nil
}

// validHeaderName: a token (RFC 9110 5.6.2), as net/http requires.
func validHeaderName(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return len(b) > 0
}

// validHeaderValue: no control characters but tab.
func validHeaderValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func truncate(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}
