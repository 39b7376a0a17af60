// Package gcpolicy sets how the garbage collector of a long-running ludus
// server trades memory for CPU.
//
// Go's default (GOGC=100: collect when the heap has grown by the live heap
// since the last collection) suits small heaps. The servers that talk to
// etcd allocate a great deal per request: protobuf decoding on both sides,
// nested transactions, watch events. Profiles of the matchmaking benchmark
// (docs/BENCHMARKS.md) found a third of all CPU in the collector at GOGC=100.
// Collecting four times less often (GOGC=400) costs heap, up to five times
// the live heap rather than two, so the policy also sets a soft memory
// limit (GOMEMLIMIT) at 90% of the memory the process may use: its cgroup's
// limit, or else the machine's. Near that limit the collector runs as often
// as it must, whatever GOGC says.
//
// The environment wins: a GOGC or GOMEMLIMIT set by the operator is kept as
// it is (AUTOMEMLIMIT=off also keeps the limit unset; AUTOMEMLIMIT=0.5 uses
// half). docs/OPERATIONS.md says which commands apply the policy.
package gcpolicy

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// ServerGCPercent is the collector's target heap growth for servers, in
// percent of the live heap, unless GOGC says otherwise.
const ServerGCPercent = 400

// memoryRatio is the share of the process's memory the soft limit allows
// the Go heap (the rest is for stacks, mmap'd files and the kernel).
const memoryRatio = 0.9

// Settings is what the policy left in force.
type Settings struct {
	// GCPercent is the collector's target heap growth (GOGC); negative
	// when the collector is off.
	GCPercent int
	// MemoryLimit is the soft memory limit in bytes (GOMEMLIMIT), 0 when
	// there is none.
	MemoryLimit int64
}

// ForServer applies the server policy to this process and returns what is
// in force. A failure to read the memory limit is logged, not fatal: the
// process then runs with GOGC alone.
func ForServer(logger *slog.Logger) Settings {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(ServerGCPercent)
	}
	if _, err := memlimit.Set(
		memlimit.WithRatio(memoryRatio),
		memlimit.WithProvider(memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)),
		memlimit.WithLogger(logger),
	); err != nil {
		logger.Warn("no soft memory limit: the collector runs on GOGC alone", "err", err)
	}
	return Current()
}

// Current reads the collector's settings in force now.
func Current() Settings {
	pct := debug.SetGCPercent(-1)
	debug.SetGCPercent(pct)
	limit := debug.SetMemoryLimit(-1) // a negative limit reads without changing
	if limit == math.MaxInt64 {
		limit = 0
	}
	return Settings{GCPercent: pct, MemoryLimit: limit}
}

// Save returns a function that puts the collector's settings back as they
// are now: for tests and tools that apply the policy for a while.
func Save() (restore func()) {
	pct := debug.SetGCPercent(-1) // reading the percent means setting it: put it back at once
	debug.SetGCPercent(pct)
	limit := debug.SetMemoryLimit(-1)
	return func() {
		debug.SetGCPercent(pct)
		debug.SetMemoryLimit(limit)
	}
}
