package batch

import (
	"syscall"
	"time"
)

// threadCPU is the calling thread's CPU time (user + system), read with
// getrusage(RUSAGE_THREAD). The caller has locked its goroutine to the thread.
func threadCPU() time.Duration {
	const rusageThread = 1
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
