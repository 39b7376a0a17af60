package engine

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/internal/wasmtest"
	"ludus.dev/ludus/sdk/abi"
)

// Hostile modules of this package only (the shared ones are in wasmtest).
var (
	// rec(n): if n { rec(n-1); rec(n-1) } — 2^n calls, depth n, no loop
	// (function 8, the first extra function of wasmtest.Hostile).
	recFunc = wasmtest.Func{Params: []byte{wasmtest.I32}, Body: []byte{
		0x20, 0x00, 0x04, 0x40,
		0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, 0x08,
		0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, 0x08,
		0x0b}}
	// memory.fill(0, 0, 64 KiB) forever.
	fillSpin = []byte{0x03, 0x40, 0x41, 0x00, 0x41, 0x00, 0x41, 0x80, 0x80, 0x04, 0xfc, 0x0b, 0x00, 0x0c, 0x00, 0x0b}
)

// The deadline leaves room for a loaded CI machine: the memory bomb and the trap
// must fail for their own reason, not because the machine was slow.
func hostileEngine(t *testing.T, mode Interrupt) *Engine {
	t.Helper()
	return newHostileEngine(t, mode, 300*time.Millisecond)
}

// undeadlinedEngine is hostileEngine (fuel mode) for tests that check what a
// call does before any deadline (a stack overflow, a memory cap): its
// deadline only stops a test that hangs. On a loaded machine 300 ms can
// pass first: four recursions at once that take about 50 ms ran past it in
// a CI run.
func undeadlinedEngine(t *testing.T) *Engine {
	t.Helper()
	return newHostileEngine(t, InterruptFuel, 10*time.Second)
}

func newHostileEngine(t *testing.T, mode Interrupt, deadline time.Duration) *Engine {
	t.Helper()
	e, err := New(context.Background(), Config{CacheDir: cacheDir, Interrupt: mode, CallDeadline: deadline, MemoryLimitPages: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func startHostile(t *testing.T, e *Engine, wasm []byte, opts InstanceOptions) *Instance {
	t.Helper()
	ctx := context.Background()
	m, err := e.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.InstantiateWith(ctx, 1, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close(ctx) })
	if err := inst.Init(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	return inst
}

// flagTimerHazard is why flag mode is not run against guests that only a
// deadline stops: its flag is set by a Go timer, and a guest spinning in
// compiled code cannot be preempted, so a garbage collection that starts while
// it spins waits for it to stop while the timer that would stop it waits for
// the collection: the test binary hangs (a CI run did, for 44 minutes). Fuel
// mode, the one nodes run, checks the clock on the guest's own thread and
// returns to Go at every refill, where the collector can stop it.
const flagTimerHazard = "flag mode cannot stop a runaway guest once a GC stop-the-world is pending (see flagTimerHazard)"

// slack is how late a deadline may be noticed: refills come every ~10 ms of the
// worst guest code, and a loaded test machine (or -race) adds scheduling noise.
const slack = 2 * time.Second

// TestHostileModules: each way a guest can misbehave fails its own match with a
// TrapError naming the export and the tick, leaves the instance unusable, and
// leaves the engine able to run other matches.
func TestHostileModules(t *testing.T) {
	for _, mode := range []Interrupt{InterruptFuel, InterruptFlag} {
		t.Run(mode.String(), func(t *testing.T) {
			e := hostileEngine(t, mode)
			ctx := context.Background()
			cases := []struct {
				name     string
				wasm     []byte
				want     string
				deadline bool
			}{
				{"trap", wasmtest.Hostile("ludus_step", []byte{0x00}), "unreachable", false},
				{"runaway loop", wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.Spin, wasmtest.I32Const(0))), "deadline", true},
				{"runaway recursion without loops", wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.I32Const(62), []byte{0x10, 0x08}, wasmtest.I32Const(0)), recFunc), "deadline", true},
				{"deep recursion", wasmtest.Hostile("ludus_step", wasmtest.Cat([]byte{0x10, 0x08}, wasmtest.I32Const(0)), wasmtest.DeepFunc), "stack overflow|deadline", false},
				{"memory bomb", wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.Bomb, []byte{0x00}, wasmtest.I32Const(0))), "unreachable", false},
			}
			if mode == InterruptFuel {
				cases = append(cases, struct {
					name     string
					wasm     []byte
					want     string
					deadline bool
				}{"bulk memory loop", wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.Spin[:2], fillSpin[2:], wasmtest.I32Const(0))), "deadline", true})
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					if mode == InterruptFlag && strings.Contains(tc.want, "deadline") {
						t.Skip(flagTimerHazard)
					}
					inst := startHostile(t, e, tc.wasm, InstanceOptions{MemoryLimitPages: 64})
					start := time.Now()
					_, err := inst.Step(ctx, nil)
					took := time.Since(start)
					var te *TrapError
					if !errors.As(err, &te) {
						t.Fatalf("step returned %v, want a TrapError", err)
					}
					if te.Export != "ludus_step" || te.Tick != 0 {
						t.Errorf("TrapError names %s at tick %d", te.Export, te.Tick)
					}
					if !containsAny(err.Error(), tc.want) {
						t.Errorf("error %q does not say %q", err, tc.want)
					}
					if tc.deadline {
						if !errors.Is(err, ErrDeadline) {
							t.Errorf("error %v is not ErrDeadline", err)
						}
						if took > inst.Deadline()+slack {
							t.Errorf("stopped after %v, deadline %v", took, inst.Deadline())
						}
					}
					// The instance is dead: later calls fail at once, without entering the guest.
					if _, err2 := inst.StateHash(ctx); err2 != err {
						t.Errorf("after the failure StateHash returned %v", err2)
					}
					if inst.Err() == nil || inst.MemoryBytes() != 0 {
						t.Error("the failed instance is still usable")
					}
					t.Logf("%v after %v", firstLine(err), took)
				})
			}
			// The engine still runs a healthy match.
			hashes, _ := runArenaOn(t, e, 3, 20)
			if len(hashes) != 20 {
				t.Fatal("the arena did not run after the hostile modules")
			}
		})
	}
}

// containsAny reports whether s contains one of the |-separated alternatives.
func containsAny(s, alts string) bool {
	for _, a := range strings.Split(alts, "|") {
		if strings.Contains(s, a) {
			return true
		}
	}
	return false
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// TestMemoryCapPerInstance: memory.grow fails at the instance's cap, not the
// engine's, and a module that needs more than the cap at start is refused.
func TestMemoryCapPerInstance(t *testing.T) {
	e := undeadlinedEngine(t)
	ctx := context.Background()
	// Step grows until it fails and returns running; the hash is memory.size.
	wasm := wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.Bomb, wasmtest.I32Const(0)))
	for _, pages := range []uint32{0, 8, 100} {
		inst := startHostile(t, e, wasm, InstanceOptions{MemoryLimitPages: pages})
		if _, err := inst.Step(ctx, nil); err != nil {
			t.Fatal(err)
		}
		want := pages
		if pages == 0 {
			want = 1024 // the engine's limit
		}
		got := uint32(inst.MemoryBytes() / 65536)
		if got > want || got+16 <= want {
			t.Errorf("cap %d pages: memory grew to %d pages", pages, got)
		}
	}
	m, err := e.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.InstantiateWith(ctx, 1, InstanceOptions{MemoryLimitPages: 0}); err != nil {
		t.Fatal(err)
	}
}

// TestRunawayOnEveryP: more runaway guests than Go has Ps, at once. A timer
// could not fire (Go cannot preempt wazero's machine code); fuel checks the
// clock on each guest's own thread, so every one of them stops.
func TestRunawayOnEveryP(t *testing.T) {
	e := hostileEngine(t, InterruptFuel)
	ctx := context.Background()
	wasm := wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.Spin, wasmtest.I32Const(0)))
	n := runtime.GOMAXPROCS(0) + 1
	insts := make([]*Instance, n)
	for i := range insts {
		insts[i] = startHostile(t, e, wasm, InstanceOptions{})
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, inst := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = inst.Step(ctx, nil)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if !errors.Is(err, ErrDeadline) {
			t.Fatalf("got %v, want ErrDeadline", err)
		}
	}
	if took := time.Since(start); took > 50*time.Millisecond+slack {
		t.Fatalf("%d runaway guests took %v to stop", n, took)
	}
}

// TestGarbageReturns: out-of-range slices, bad codes and a broken scratch
// buffer are errors, never panics.
func TestGarbageReturns(t *testing.T) {
	e := hostileEngine(t, InterruptFuel)
	ctx := context.Background()
	huge := wasmtest.I64Const(int64(1024)<<32 | 0x7fffffff)
	t.Run("huge view", func(t *testing.T) {
		inst := startHostile(t, e, wasmtest.Hostile("ludus_view", huge), InstanceOptions{})
		if _, err := inst.View(ctx, 0); err == nil || !strings.Contains(err.Error(), "outside linear memory") {
			t.Fatalf("View: %v", err)
		}
	})
	t.Run("huge result", func(t *testing.T) {
		inst := startHostile(t, e, wasmtest.Hostile("ludus_result", huge), InstanceOptions{})
		if _, err := inst.Result(ctx); err == nil {
			t.Fatal("Result accepted a slice beyond memory")
		}
	})
	t.Run("bad step code", func(t *testing.T) {
		inst := startHostile(t, e, wasmtest.Hostile("ludus_step", wasmtest.I32Const(7)), InstanceOptions{})
		if _, err := inst.Step(ctx, nil); err == nil || !strings.Contains(err.Error(), "returned 7") {
			t.Fatalf("Step: %v", err)
		}
	})
	t.Run("no scratch buffer", func(t *testing.T) {
		inst := startHostile(t, e, wasmtest.Hostile("ludus_buffer", wasmtest.I32Const(0)), InstanceOptions{})
		if _, err := inst.StepEncoded(ctx, []byte{3, 0, 1, 0, 1}); err == nil || !strings.Contains(err.Error(), "no usable buffer") {
			t.Fatalf("Step: %v", err)
		}
	})
	t.Run("buffer past memory", func(t *testing.T) {
		inst := startHostile(t, e, wasmtest.Hostile("ludus_buffer", wasmtest.I32Const(65530)), InstanceOptions{})
		if _, err := inst.StepEncoded(ctx, []byte{3, 0, 10, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}); err == nil {
			t.Fatal("a buffer beyond memory was accepted")
		}
	})
}

// runArenaOn steps an 8-bot arena on e and returns its state hashes.
func runArenaOn(t *testing.T, e *Engine, seed uint64, ticks int) ([]uint64, error) {
	t.Helper()
	ctx := context.Background()
	m, err := e.Compile(ctx, builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	if err := inst.Init(ctx, seed, []byte(`{"bots":8}`)); err != nil {
		t.Fatal(err)
	}
	var hashes []uint64
	for i := 0; i < ticks; i++ {
		if _, err := inst.Step(ctx, nil); err != nil {
			t.Fatal(err)
		}
		h, err := inst.StateHash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
	}
	return hashes, nil
}

// TestGlobalsOutOfRange: an instruction naming a global the module does not
// have is refused when the module is compiled. The rewriter's own globals
// (fuel, deadline, stack budget) get the indices right after the module's,
// and wazero validates only the rewritten module, so without the check a
// module could set its own fuel or deadline and run forever.
func TestGlobalsOutOfRange(t *testing.T) {
	e := hostileEngine(t, InterruptFuel)
	ctx := context.Background()
	for _, idx := range []uint32{0, 1, 2, 3} {
		for _, op := range []struct {
			name string
			body []byte
		}{
			{"global.set", wasmtest.Cat([]byte{0x03, 0x40}, wasmtest.I64Const(1<<63-1), []byte{0x24}, wasmtest.LEB(idx), []byte{0x0c, 0x00, 0x0b}, wasmtest.I32Const(0))},
			{"global.get", wasmtest.Cat([]byte{0x23}, wasmtest.LEB(idx), []byte{0x1a}, wasmtest.I32Const(0))},
		} {
			_, err := e.Compile(ctx, wasmtest.Hostile("ludus_step", op.body))
			if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "global") {
				t.Errorf("%s %d in a module without globals: compile returned %v, want a refusal naming the global", op.name, idx, err)
			}
		}
	}
}

// TestMetaTooLarge: metadata over abi.MaxMetaBytes is refused before it is
// decoded.
func TestMetaTooLarge(t *testing.T) {
	e := hostileEngine(t, InterruptFuel)
	funcs := wasmtest.ABIFuncs(wasmtest.I64Const(int64(wasmtest.DataAddr)<<32 | int64(abi.MaxMetaBytes+1)))
	wasm := wasmtest.Module{Funcs: funcs, MemoryPages: 2, ExportMemory: true, Data: []byte(`{"name":"g","controls":[{},{},{}`)}.Bytes()
	_, err := e.Validate(context.Background(), wasm)
	if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "bytes; at most") {
		t.Fatalf("metadata of %d bytes: %v", abi.MaxMetaBytes+1, err)
	}
}
