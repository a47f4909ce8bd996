package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressBar draws one self-overwriting line on a terminal-ish writer,
// at most every 100ms, and a final line on done.
type progressBar struct {
	mu    sync.Mutex
	w     io.Writer
	what  string
	last  time.Time
	start time.Time
	now   func() time.Time
}

func newProgress(w io.Writer, what string, now func() time.Time) *progressBar {
	return &progressBar{w: w, what: what, now: now, start: now()}
}

func (p *progressBar) update(done, total int, note string) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.now()
	if done < total && t.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last = t
	const width = 30
	fill := 0
	if total > 0 {
		fill = min(width, done*width/total)
	}
	fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d %s %s", p.what, strings.Repeat("#", fill), strings.Repeat(".", width-fill),
		done, total, t.Sub(p.start).Round(100*time.Millisecond), note)
	if done >= total {
		fmt.Fprintln(p.w)
	}
}
