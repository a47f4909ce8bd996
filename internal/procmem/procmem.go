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
