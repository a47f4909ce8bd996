// Package procmem reads how much memory this process holds resident, for
// benchmarks and soaks that report a peak against a container's limit. It
// reads Linux's /proc and nothing else.
package procmem

import (
	"os"
	"strconv"
	"strings"
)

// Resident is the process's resident set size in bytes now, 0 where /proc
// cannot tell.
func Resident() int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// Split is resident memory by kind, from /proc/self/status: Anon is the
// heap, stacks and other private memory the process wrote; File is mapped
// files' pages (the binary, and a database's mmap'd file such as etcd's
// bbolt); Shmem is shared memory.
type Split struct{ Anon, File, Shmem int64 }

// ResidentSplit splits the process's resident memory by kind now; zero where
// /proc cannot tell.
func ResidentSplit() Split {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return Split{}
	}
	var s Split
	for _, line := range strings.Split(string(data), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch key {
		case "RssAnon":
			s.Anon = kb << 10
		case "RssFile":
			s.File = kb << 10
		case "RssShmem":
			s.Shmem = kb << 10
		}
	}
	return s
}
