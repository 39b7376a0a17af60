package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"ludus.dev/ludus/internal/wasmtest"
)

// countdown is a ludus_step that counts its parameter local down from n: a
// guest that needs a fixed amount of CPU and then returns.
func countdown(n int32) []byte {
	return wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.I32Const(n), []byte{0x21, 0x00, // local.set 0
		0x03, 0x40, 0x20, 0x00, 0x41, 0x01, 0x6b, 0x22, 0x00, 0x0d, 0x00, 0x0b}, // loop: local.tee 0 (local.get 0 - 1); br_if
		wasmtest.I32Const(0)))
}

// TestDeadlineCountsTheGuestThreadsCPU: a call's deadline is the CPU time of
// the guest's thread (budget.go), so a starved thread — a loaded machine —
// does not fail a guest that did nothing wrong, and a runaway guest is still
// stopped, at the latest after starvedCallLimit deadlines of wall time. The
// thread's CPU clock is replaced by one that runs at a fraction of the wall
// clock, as a thread given that share of a core would see.
func TestDeadlineCountsTheGuestThreadsCPU(t *testing.T) {
	if threadCPUClock() == nil {
		t.Skip("no thread CPU clock on this platform: deadlines are wall-clock time")
	}
	ctx := context.Background()
	const deadline = 50 * time.Millisecond
	starve := func(e *Engine, share int64) {
		if share == 0 {
			e.threadCPU = func() int64 { return 0 }
		} else {
			e.threadCPU = func() int64 { return e.now() / share }
		}
	}
	runaway := wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.Spin, wasmtest.I32Const(0)))
	for _, tc := range []struct {
		name     string
		share    int64 // the thread gets 1/share of the wall clock; 0: none
		min, max time.Duration
	}{
		// Charged the first quarter deadline whole, then a quarter of the wall
		// clock: it stops at 3.25 deadlines.
		{"a quarter of a core", 4, 3 * deadline, starvedCallLimit*deadline + slack},
		{"no CPU at all", 0, starvedCallLimit * deadline, starvedCallLimit*deadline + slack},
	} {
		t.Run("runaway on "+tc.name, func(t *testing.T) {
			e := newHostileEngine(t, InterruptFuel, deadline)
			starve(e, tc.share)
			inst := startHostile(t, e, runaway, InstanceOptions{})
			start := time.Now()
			_, err := inst.Step(ctx, nil)
			took := time.Since(start)
			if !errors.Is(err, ErrDeadline) {
				t.Fatalf("the runaway step returned %v, want ErrDeadline", err)
			}
			if took < tc.min || took > tc.max {
				t.Fatalf("the runaway was stopped after %v; want %v to %v", took, tc.min, tc.max)
			}
			t.Logf("stopped after %v", took)
		})
	}

	// A guest that needs about twice its deadline of wall time, on a thread
	// given a quarter of a core, is charged 0.69 of its deadline: it returns.
	// (A call that needs more than 3.25 deadlines is stopped, rightly: the
	// loop is re-sized from what each attempt took.)
	e := newHostileEngine(t, InterruptFuel, deadline)
	starve(e, 4)
	iterations := int64(1 << 22)
	for attempt := 0; attempt < 8; attempt++ {
		inst := startHostile(t, e, countdown(int32(iterations)), InstanceOptions{})
		start := time.Now()
		_, err := inst.Step(ctx, nil)
		took := time.Since(start)
		switch {
		case err != nil && took < 3*deadline:
			t.Fatalf("a step stopped after %v on a quarter of a core, before its budget could run out: %v", took, err)
		case err == nil && took > deadline:
			t.Logf("a step of %v (deadline %v) on a quarter of a core returned", took, deadline)
			return
		}
		// Too short to outlast its wall deadline, or stopped for being too
		// long: aim for two deadlines.
		iterations = min(max(iterations*int64(2*deadline)/int64(max(took, time.Millisecond)), 1), 1<<30)
	}
	t.Skip("the machine is too noisy to size a step of two deadlines")
}
