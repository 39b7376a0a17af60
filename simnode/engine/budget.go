package engine

import (
	"github.com/tetratelabs/wazero/api"
)

// callBudget is one fuel-mode call's time: its deadline counts the CPU time
// of the guest's own thread, not the wall clock, so a guest is stopped for
// what it ran, not for what a loaded machine did meanwhile. On two shared
// cores under -race, with three busy processes beside it, the arena's first
// ludus_render (22 ms of CPU: the renderer's memory grows) and a
// ludus_state_hash took over 100 ms of wall time, and the node failed a
// healthy match and every renderer it started for "exceeding its CPU
// deadline".
//
// Reading a thread's CPU clock is a system call (about 2 µs in a VM; an arena
// snapshot takes 3 µs), so the wall clock stays the cheap first test: refill
// compares it with the deadline global as before. A call still running after a
// quarter of its deadline reads its thread's CPU clock once, at that refill,
// as its baseline, and it is charged the wall time before it, up to that
// quarter (so on an idle machine a runaway stops at its deadline, as before);
// calls shorter than that, nearly all of them, never read it. When the wall deadline passes, the
// CPU time since the baseline is read: if the call used less than its
// deadline, its thread was kept from running (other processes, a garbage
// collection) and the call gets a new wall deadline at the earliest moment it
// could have used the rest. A call is stopped when it used its deadline, or,
// however starved, at starvedCallLimit times the deadline of wall time.
type callBudget struct {
	limit     int64 // the call's deadline, in nanoseconds of its thread's CPU time
	wallStart int64 // Engine.now when the call began
	wallBase  int64 // Engine.now when cpuBase was read
	cpuBase   int64 // the thread's CPU clock at the baseline; -1 before it
}

// starvedCallLimit bounds a call's wall time, in deadlines, however little CPU
// its thread was given: a node so loaded that a call waits ten times its
// deadline cannot serve its match anyway.
const starvedCallLimit = 10

// check runs at each refill of the call whose wall deadline global is dl: it
// panics with errDeadline once the call is over its budget, and moves the
// deadline global when the thread was starved.
func (b *callBudget) check(e *Engine, mod api.Module, dl int64) {
	now := e.now()
	if e.threadCPU == nil {
		if now > dl {
			panic(errDeadline)
		}
		return
	}
	if b.cpuBase < 0 {
		if now-b.wallStart < b.limit/4 {
			return // young: well within its deadline whatever the clock
		}
		b.cpuBase, b.wallBase = e.threadCPU(), now
	}
	if now <= dl {
		return
	}
	// Before the baseline the call used at most a quarter of its deadline of
	// CPU: the refill before it came earlier than that in wall time, and one
	// fuel quantum since is noise. A thread that was kept waiting before its
	// baseline is not charged for the wait.
	used := min(b.wallBase-b.wallStart, b.limit/4) + e.threadCPU() - b.cpuBase
	hardStop := b.wallStart + starvedCallLimit*b.limit
	if used >= b.limit || now >= hardStop {
		panic(errDeadline)
	}
	mod.ExportedGlobal(deadlineExport).(api.MutableGlobal).Set(uint64(min(now+b.limit-used, hardStop)))
}
