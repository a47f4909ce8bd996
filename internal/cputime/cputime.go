// Package cputime reads the CPU time a process has used, for benchmarks
// that report CPU per unit of work: on a shared machine that moves less with
// other load than a rate does.
package cputime

import (
	"syscall"
	"testing"
	"time"
)

// Process is the user and system CPU this process has used.
func Process(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
