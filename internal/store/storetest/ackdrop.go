package storetest

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// AckDropper is a TCP proxy in front of Postgres that loses the
// acknowledgement of committed COPYs: when Postgres reports a transaction
// that held a COPY as committed (ReadyForQuery, idle, after a CopyInResponse
// since the last idle one: an autocommit COPY or a COMMIT after one), the
// proxy closes both connections before the client reads that report. The
// rows are stored; the client sees a dropped connection, as when the
// network fails between Postgres's commit and its answer.
type AckDropper struct {
	ln net.Listener
	// left is how many more acknowledgements to lose; every n-th committed
	// COPY (counting from the first) loses its acknowledgement.
	left, every int64
	commits     atomic.Int64
	dropped     atomic.Int64
	wg          sync.WaitGroup
}

// NewAckDropper proxies to the server in dbURL, losing the acknowledgement
// of every n-th committed COPY until it has lost cuts of them; URL is dbURL
// through the proxy.
func NewAckDropper(t testing.TB, dbURL string, every, cuts int) (*AckDropper, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("ack dropper: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("ack dropper: %v", err)
	}
	d := &AckDropper{ln: ln, left: int64(cuts), every: int64(max(every, 1))}
	target := u.Host
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.wg.Add(1)
			go func() { defer d.wg.Done(); d.pipe(c, target) }()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	u.Host = ln.Addr().String()
	// The proxy reads the plain protocol.
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return d, u.String()
}

// Dropped is how many acknowledgements the proxy has lost.
func (d *AckDropper) Dropped() int { return int(d.dropped.Load()) }

// take decides whether the acknowledgement of the commit just seen is lost.
func (d *AckDropper) take() bool {
	n := d.commits.Add(1)
	if (n-1)%d.every != 0 {
		return false
	}
	if atomic.AddInt64(&d.left, -1) < 0 {
		return false
	}
	d.dropped.Add(1)
	return true
}

func (d *AckDropper) pipe(client net.Conn, target string) {
	server, err := net.Dial("tcp", target)
	if err != nil {
		client.Close()
		return
	}
	defer client.Close()
	defer server.Close()
	go func() { io.Copy(server, client); server.Close() }()

	// Server to client: every message is a type byte and a big-endian
	// length that counts itself. Messages are held until one the client
	// must see to go on (ReadyForQuery, a COPY or authentication request, an
	// error), so that a COMMIT's CommandComplete is lost with its
	// ReadyForQuery.
	r := bufio.NewReader(server)
	w := bufio.NewWriterSize(client, 64<<10)
	copying := false
	for {
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		size := int(binary.BigEndian.Uint32(head[1:])) - 4
		if size < 0 {
			return
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		switch head[0] {
		case 'G': // CopyInResponse
			copying = true
		case 'Z': // ReadyForQuery: 'I' idle, no transaction open
			if body[0] == 'I' {
				if copying && d.take() {
					return
				}
				copying = false
			}
		case 'C': // CommandComplete of a failed COMMIT says ROLLBACK
			if strings.HasPrefix(string(body), "ROLLBACK") {
				copying = false
			}
		}
		w.Write(head[:])
		w.Write(body)
		switch head[0] {
		case 'Z', 'G', 'H', 'W', 'R', 'E':
			if w.Flush() != nil {
				return
			}
		}
	}
}
