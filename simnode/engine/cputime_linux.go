//go:build linux

package engine

import "golang.org/x/sys/unix"

// threadCPUClock returns a reader of the calling thread's CPU time in
// nanoseconds (CLOCK_THREAD_CPUTIME_ID), or nil if the kernel refuses it.
func threadCPUClock() func() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return nil
	}
	return func() int64 {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		return ts.Nano()
	}
}
