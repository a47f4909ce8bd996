package exporter

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"sync"
)

// ServePage answers every request on a loopback listener with page, framed
// as dcgm-exporter's Go HTTP server frames it (status line, Content-Type,
// Date, chunked transfer encoding with the page as one chunk), prebuilt once
// and written with one system call. It stands in for an exporter where only
// the scraping side is measured: on a GPU node the exporter runs on its own
// CPUs, so here it should cost as little of the shared ones as the bytes on
// the wire allow. stop closes the listener and every connection.
func ServePage(page []byte) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var resp bytes.Buffer
	fmt.Fprintf(&resp, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nDate: Fri, 01 May 2026 00:00:00 GMT\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n", len(page))
	resp.Write(page)
	resp.WriteString("\r\n0\r\n\r\n")
	response := resp.Bytes()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	stop = func() {
		ln.Close()
		// Scrapers keep connections open between scrapes.
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				r := bufio.NewReaderSize(c, 4096)
				for {
					// A GET has no body: the request ends at the first empty line.
					for {
						line, err := r.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
					}
					if _, err := c.Write(response); err != nil {
						return
					}
				}
			})
		}
	})
	return "http://" + ln.Addr().String() + "/metrics", stop, nil
}
