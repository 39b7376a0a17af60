//go:build !linux

package batch

import "time"

var cpuEpoch = time.Now()

// threadCPU approximates the thread's CPU time by the wall clock where
// per-thread CPU time is not available: a game's "CPU" is then its wall time,
// an overestimate when the machine is busy.
func threadCPU() time.Duration { return time.Since(cpuEpoch) }
