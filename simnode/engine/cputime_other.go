//go:build !linux

package engine

// threadCPUClock returns nil: call deadlines are wall-clock time on this
// platform (Linux, where nodes run, counts the guest thread's CPU time).
func threadCPUClock() func() int64 { return nil }
