package procmem

import (
	"runtime"
	"testing"
)

// TestResidentSplitAddsUp: the kinds add up to the resident set, read a
// moment apart, and the anonymous part holds at least a buffer just
// written.
func TestResidentSplitAddsUp(t *testing.T) {
	if Resident() == 0 {
		t.Skip("no /proc here")
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = 1
	}
	s, rss := ResidentSplit(), Resident()
	sum := s.Anon + s.File + s.Shmem
	if d := sum - rss; d < -(8<<20) || d > 8<<20 {
		t.Errorf("anon %d + file %d + shmem %d = %d, resident %d", s.Anon, s.File, s.Shmem, sum, rss)
	}
	if s.Anon < int64(len(buf)) {
		t.Errorf("anonymous resident %d bytes, below the %d just written", s.Anon, len(buf))
	}
	runtime.KeepAlive(buf)
}
