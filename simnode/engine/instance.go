package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"ludus.dev/ludus/sdk/abi"
)

// Instance is one running copy of a module: one match. Not safe for concurrent use.
//
// A call that traps, exceeds its deadline or exits poisons the instance: its
// linear memory is freed at once and every later call returns the same error.
type Instance struct {
	mod api.Module
	mem api.Memory
	m   *Module
	// released is set once the instance no longer counts as a live one of m.
	released atomic.Bool

	fnVersion, fnMeta, fnBuffer, fnInit, fnStep, fnView, fnHash, fnResult, fnSave, fnLoad api.Function

	// tick is the number of ticks stepped so far; the guest's clocks derive from it.
	tick   int64
	period int64 // nanoseconds per tick
	ended  bool

	opts     InstanceOptions
	rand     *switchableStream
	deadline api.MutableGlobal // fuel mode: the current call's deadline
	budget   *callBudget       // fuel mode: the current call's time (budget.go)
	flag     *flagWatch        // flag mode
	failed   error             // the error that poisoned the instance

	stack  [2]uint64
	events []byte
	out    *guestOutput
}

// InstanceOptions are per-match limits, e.g. from the tenant's quota. The zero
// value means the engine's defaults.
type InstanceOptions struct {
	// MemoryLimitPages caps this instance's linear memory (64 KiB pages); at most
	// Config.MemoryLimitPages. memory.grow beyond it fails (returns -1), which a Go
	// guest turns into a fatal "out of memory" trap.
	MemoryLimitPages uint32
	// CallDeadline overrides Config.CallDeadline.
	CallDeadline time.Duration
}

// ErrDeadline is the cause of a TrapError for a call that ran past its deadline.
var ErrDeadline = errors.New("exceeded its CPU deadline (runaway guest stopped)")

// ErrStackOverflow is the cause of a TrapError for a call whose wasm calls
// nested deeper than the instance's stack budget, StackLimit, allows (fuel
// mode).
var ErrStackOverflow = errors.New("stack overflow: calls nested too deeply (unbounded recursion?)")

// StackLimit is each instance's budget for its wasm call stack, in bytes of
// frame cost (fuel mode; docs/RATIONALE.md, "Why count the call stack"): a
// call of a function that calls others takes its frame cost, an upper bound of
// its real frame computed from its code, until it returns; a call that would
// overdraw the budget fails with ErrStackOverflow. About 3,000 frames of a
// small recursive Go function fit, and 1,000 of a function of ~1,000 wasm
// instructions. The budget depends on the module's code alone, so a match
// overflows at the same call on every node and in every replay.
const StackLimit = 8 << 20

// StackSlack bounds the host memory an instance's call stack takes beyond its
// linear memory cap, whatever the guest does. The real stack is at most the
// budget (plus one small leaf frame) — at most 2/3 of it for the worst frame
// shapes measured (TestFrameCostCoversWazeroFrames) — and wazero keeps it in a
// Go slice that it doubles when full: the new slice, the one being copied and
// earlier ones not yet collected hold up to 4 times the real stack. Measured:
// 6-11 MiB per instance for unbounded recursions (TestDeepRecursionMemory).
const StackSlack = 3 * StackLimit

// clockBase keeps guest clocks away from zero: Go's runtime aborts when nanotime
// returns 0.
const clockBase = int64(time.Second)

// warmSeed seeds the random stream every instance's _initialize reads, so that
// instances are identical whether pre-instantiated (warm) or not; the match seed
// takes over before ludus_init.
const warmSeed = 0x4C554455535F494E // "LUDUS_IN"

// Instantiate creates a fresh instance whose randomness derives from seed. The
// module's start function (_initialize for Go reactors) has run when it returns.
func (m *Module) Instantiate(ctx context.Context, seed uint64) (*Instance, error) {
	return m.InstantiateWith(ctx, seed, InstanceOptions{})
}

// InstantiateWith is Instantiate with per-instance limits.
func (m *Module) InstantiateWith(ctx context.Context, seed uint64, opts InstanceOptions) (*Instance, error) {
	inst, err := m.instantiate(ctx, opts)
	if err != nil {
		return nil, err
	}
	inst.start(seed)
	return inst, nil
}

// start turns a freshly initialised instance into one for a match with seed.
func (i *Instance) start(seed uint64) {
	i.period = int64(time.Second) / int64(i.m.Meta.TickRate)
	i.rand.reseed(seed)
}

func (m *Module) instantiate(ctx context.Context, opts InstanceOptions) (*Instance, error) {
	e := m.eng
	if m.evicted.Load() {
		return nil, &TrapError{Export: "_initialize", Err: errEvicted}
	}
	limit := e.cfg.MemoryLimitPages
	if opts.MemoryLimitPages != 0 && opts.MemoryLimitPages < limit {
		limit = opts.MemoryLimitPages
	}
	if m.minPages > limit {
		return nil, &TrapError{Export: "_initialize", Err: fmt.Errorf("the module needs %d pages of memory at start; this match may use %d", m.minPages, limit)}
	}
	inst := &Instance{m: m, opts: opts, period: int64(time.Second) / 35,
		rand: &switchableStream{s: newSeededStream(warmSeed)}}
	inst.out = newGuestOutput(func() int64 { return inst.tick })
	now := func() int64 { return clockBase + inst.tick*inst.period }
	cfg := wazero.NewModuleConfig().
		WithName("").         // anonymous: many instances of one module may coexist
		WithStartFunctions(). // _initialize is called below, under a deadline
		WithNanotime(now, 1).
		WithWalltime(func() (int64, int32) {
			t := now()
			return t / int64(time.Second), int32(t % int64(time.Second))
		}, 1).
		WithRandSource(inst.rand).
		WithStdout(stream{o: inst.out}).
		WithStderr(stream{o: inst.out, stderr: true})
	ictx := ctx
	if limit < e.cfg.MemoryLimitPages {
		ictx = experimental.WithMemoryAllocator(ctx, cappedAllocator(uint64(limit)*65536))
	}
	mod, err := e.rt.InstantiateModule(ictx, m.compiled, cfg)
	if err != nil {
		return nil, &TrapError{Export: "_initialize", Err: err}
	}
	inst.mod = mod
	m.live.Add(1) // until closeModule
	m.used.Store(e.now())
	inst.mem = mod.Memory()
	get := func(name string) api.Function { return mod.ExportedFunction(name) }
	inst.fnVersion = get(abi.ExportABIVersion)
	inst.fnMeta = get(abi.ExportMeta)
	inst.fnBuffer = get(abi.ExportBuffer)
	inst.fnInit = get(abi.ExportInit)
	inst.fnStep = get(abi.ExportStep)
	inst.fnView = get(abi.ExportView)
	inst.fnHash = get(abi.ExportStateHash)
	inst.fnResult = get(abi.ExportResult)
	if m.HasCheckpoint {
		inst.fnSave = get(abi.ExportSave)
		inst.fnLoad = get(abi.ExportLoad)
	}
	switch e.cfg.Interrupt {
	case InterruptFuel:
		inst.deadline, _ = mod.ExportedGlobal(deadlineExport).(api.MutableGlobal)
		inst.budget = &callBudget{}
		e.budgets.Store(mod, inst.budget)
	case InterruptFlag:
		if g, ok := mod.ExportedGlobal(counterExport).(api.MutableGlobal); ok {
			inst.flag = newFlagWatch(g)
		}
	}
	if fn := get("_initialize"); fn != nil {
		if _, err := inst.callWithin(ctx, fn, e.cfg.InitDeadline); err != nil {
			inst.Close(ctx)
			return nil, err
		}
	}
	return inst, nil
}

// MemoryBytes is the size of the instance's linear memory.
func (i *Instance) MemoryBytes() int {
	if i.failed != nil {
		return 0
	}
	return int(i.mem.Size())
}

// Err returns the error that made the instance unusable, if any.
func (i *Instance) Err() error { return i.failed }

// Deadline returns the deadline of one call into this instance.
func (i *Instance) Deadline() time.Duration {
	if i.opts.CallDeadline > 0 {
		return i.opts.CallDeadline
	}
	return i.m.eng.cfg.CallDeadline
}

// Close frees the instance's memory. It may be called more than once.
func (i *Instance) Close(ctx context.Context) error {
	if i.flag != nil {
		i.flag.timer.Stop()
	}
	return i.closeModule(ctx)
}

// closeModule frees the instance's module (more than once is fine).
func (i *Instance) closeModule(ctx context.Context) error {
	if i.budget != nil {
		i.m.eng.budgets.Delete(i.mod)
	}
	if i.released.CompareAndSwap(false, true) {
		i.m.live.Add(-1)
	}
	return i.mod.Close(ctx)
}

// Tick is the number of ticks stepped so far.
func (i *Instance) Tick() int64 { return i.tick }

// Ended reports whether the game said it ended.
func (i *Instance) Ended() bool { return i.ended }

// Output returns what the guest wrote to stdout/stderr (capped).
func (i *Instance) Output() string { return i.out.String() }

// SetOutputSink sends every line the guest writes from now on to sink (nil:
// nowhere), stamped with the tick. A line is complete at a newline or at the
// end of the call that wrote it.
func (i *Instance) SetOutputSink(sink OutputSink) { i.out.setSink(sink) }

// TrapError is a guest failure: a trap, a bad return value, a broken buffer,
// or a ludus_init or ludus_load that returned an error code (Code).
type TrapError struct {
	Export string
	Tick   int64
	Err    error
	// Code is the non-zero code ludus_init or ludus_load returned; 0 for a
	// trap.
	Code int32
	// Message is the module's own words about the failure, from what it
	// wrote to stderr during the failing call (GuestMessage); empty if it
	// wrote nothing.
	Message string
}

func (e *TrapError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("game module failed in %s at tick %d: %s (%v)", e.Export, e.Tick, e.Message, e.Err)
	}
	return fmt.Sprintf("game module failed in %s at tick %d: %v", e.Export, e.Tick, e.Err)
}

// Reason says what went wrong in one line for players and operators, in the
// module's words when it gave some: "module refused the config: unknown map
// \"dust3\" (Init returned 1)", "module trapped at tick 41: MSG (wasm error:
// unreachable)". It omits the wasm stack trace that Error keeps.
func (e *TrapError) Reason() string {
	what := errLine(e.Err)
	switch {
	case e.Code != 0 && e.Export == abi.ExportInit:
		if e.Message != "" {
			return fmt.Sprintf("module refused the config: %s (Init returned %d)", e.Message, e.Code)
		}
		return fmt.Sprintf("module refused the config (Init returned %d)", e.Code)
	case e.Code != 0:
		if e.Message != "" {
			return fmt.Sprintf("module %s: %s (%s)", what, e.Message, e.Export)
		}
		return fmt.Sprintf("module %s (%s)", what, e.Export)
	case e.Message != "":
		return fmt.Sprintf("module trapped at tick %d: %s (%s)", e.Tick, e.Message, what)
	}
	return fmt.Sprintf("module failed in %s at tick %d: %s", e.Export, e.Tick, what)
}

func (e *TrapError) Unwrap() error { return e.Err }

func (i *Instance) call(ctx context.Context, fn api.Function, params ...uint64) (uint64, error) {
	return i.callWithin(ctx, fn, i.Deadline(), params...)
}

// callWithin calls fn with the interruption mechanism armed for d.
func (i *Instance) callWithin(ctx context.Context, fn api.Function, d time.Duration, params ...uint64) (uint64, error) {
	if i.failed != nil {
		return 0, i.failed
	}
	s := i.stack[:]
	copy(s, params)
	i.out.beginCall()
	defer i.out.endCall()
	var err error
	switch {
	case i.deadline != nil:
		// The deadline counts the CPU time of the guest's thread (budget.go),
		// so the call stays on one thread from here to its return.
		runtime.LockOSThread()
		now := i.m.eng.now()
		*i.budget = callBudget{limit: int64(d), wallStart: now, cpuBase: -1}
		i.deadline.Set(uint64(now + int64(d)))
		err = fn.CallWithStack(ctx, s)
		runtime.UnlockOSThread()
	case i.flag != nil:
		err = i.flag.call(ctx, fn, s, d)
	case i.m.eng.cfg.Interrupt == InterruptWazero:
		cctx, cancel := context.WithTimeout(ctx, d)
		err = fn.CallWithStack(cctx, s)
		if err != nil && cctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("%w: %v", ErrDeadline, err)
		}
		cancel()
	default:
		err = fn.CallWithStack(ctx, s)
	}
	if err != nil {
		switch {
		case errors.Is(err, ErrDeadline):
			err = fmt.Errorf("%w (deadline %v)", ErrDeadline, d)
		case errors.Is(err, ErrStackOverflow):
			err = fmt.Errorf("%w; the stack budget is %d KiB", ErrStackOverflow, StackLimit>>10)
		}
		i.failed = &TrapError{Export: fn.Definition().ExportNames()[0], Tick: i.tick, Err: err, Message: i.out.message()}
		i.closeModule(context.WithoutCancel(ctx))
		i.release()
		return 0, i.failed
	}
	return s[0], nil
}

// release drops the instance's exported functions once it failed: each holds
// the wasm stack wazero grew for its calls, which a deep recursion made as
// large as the stack budget allows.
func (i *Instance) release() {
	i.fnVersion, i.fnMeta, i.fnBuffer, i.fnInit, i.fnStep, i.fnView, i.fnHash, i.fnResult, i.fnSave, i.fnLoad =
		nil, nil, nil, nil, nil, nil, nil, nil, nil, nil
}

// packed calls a function returning a packed slice and returns the bytes, which
// alias guest memory until the next call into the instance.
func (i *Instance) packed(ctx context.Context, fn api.Function) ([]byte, error) {
	res, err := i.call(ctx, fn)
	if err != nil {
		return nil, err
	}
	return i.read(fn, res)
}

func (i *Instance) read(fn api.Function, res uint64) ([]byte, error) {
	ptr, n := abi.Unpack(res)
	if n == 0 {
		return nil, nil
	}
	b, ok := i.mem.Read(ptr, n)
	if !ok {
		return nil, &TrapError{Export: fn.Definition().ExportNames()[0], Tick: i.tick,
			Err: fmt.Errorf("returned slice [%d, +%d) outside linear memory of %d bytes", ptr, n, i.mem.Size())}
	}
	return b, nil
}

// writeBuffer copies b into the guest's scratch buffer.
func (i *Instance) writeBuffer(ctx context.Context, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	ptr, err := i.call(ctx, i.fnBuffer, uint64(len(b)))
	if err != nil {
		return err
	}
	if ptr == 0 || !i.mem.Write(uint32(ptr), b) {
		return &TrapError{Export: abi.ExportBuffer, Tick: i.tick,
			Err: fmt.Errorf("returned no usable buffer of %d bytes (pointer %d)", len(b), uint32(ptr))}
	}
	return nil
}

// Init starts the match with its seed and config.
func (i *Instance) Init(ctx context.Context, seed uint64, config []byte) error {
	if err := i.writeBuffer(ctx, config); err != nil {
		return err
	}
	code, err := i.callWithin(ctx, i.fnInit, i.m.eng.cfg.InitDeadline, seed, uint64(len(config)))
	if err != nil {
		return err
	}
	if int32(code) != 0 {
		return &TrapError{Export: abi.ExportInit, Code: int32(code), Message: i.out.message(),
			Err: fmt.Errorf("refused the config (error code %d)", int32(code))}
	}
	return nil
}

// Step applies events and advances one tick. It reports whether the game ended.
func (i *Instance) Step(ctx context.Context, events []abi.Event) (bool, error) {
	i.events = abi.AppendEvents(i.events[:0], events)
	return i.StepEncoded(ctx, i.events)
}

// StepEncoded is Step with events already in their wire encoding.
func (i *Instance) StepEncoded(ctx context.Context, events []byte) (bool, error) {
	if i.ended {
		return true, nil
	}
	if err := i.writeBuffer(ctx, events); err != nil {
		return false, err
	}
	code, err := i.call(ctx, i.fnStep, uint64(len(events)))
	if err != nil {
		return false, err
	}
	i.tick++
	switch int32(code) {
	case abi.StepRunning:
	case abi.StepEnded:
		i.ended = true
	default:
		return false, &TrapError{Export: abi.ExportStep, Tick: i.tick, Err: fmt.Errorf("returned %d; want 0 (running) or 1 (ended)", int32(code))}
	}
	return i.ended, nil
}

// View renders slot's view (abi.SpectatorSlot for the spectator). The bytes alias
// guest memory until the next call: copy them to keep them.
func (i *Instance) View(ctx context.Context, slot int) ([]byte, error) {
	res, err := i.call(ctx, i.fnView, api.EncodeI32(int32(slot)))
	if err != nil {
		return nil, err
	}
	return i.read(i.fnView, res)
}

// StateHash returns the game's hash of its state.
func (i *Instance) StateHash(ctx context.Context) (uint64, error) {
	return i.call(ctx, i.fnHash)
}

// Result returns the module's JSON match result (copied).
func (i *Instance) Result(ctx context.Context) ([]byte, error) {
	b, err := i.packed(ctx, i.fnResult)
	return append([]byte(nil), b...), err
}

// Save returns a checkpoint (copied), or nil if the module has none.
func (i *Instance) Save(ctx context.Context) ([]byte, error) {
	if i.failed != nil {
		return nil, i.failed
	}
	if i.fnSave == nil {
		return nil, nil
	}
	b, err := i.packed(ctx, i.fnSave)
	return append([]byte(nil), b...), err
}

// Load restores a checkpoint taken at tick.
func (i *Instance) Load(ctx context.Context, tick int64, state []byte) error {
	if i.failed != nil {
		return i.failed
	}
	if i.fnLoad == nil {
		return fmt.Errorf("engine: module has no checkpoint support")
	}
	if err := i.writeBuffer(ctx, state); err != nil {
		return err
	}
	code, err := i.callWithin(ctx, i.fnLoad, i.m.eng.cfg.InitDeadline, uint64(len(state)))
	if err != nil {
		return err
	}
	if int32(code) != 0 {
		return &TrapError{Export: abi.ExportLoad, Tick: i.tick, Code: int32(code), Message: i.out.message(),
			Err: fmt.Errorf("refused the checkpoint (error code %d)", int32(code))}
	}
	i.tick = tick
	return nil
}

// seededStream is the guest's random_get: splitmix64 from the match seed, so the
// same seed reproduces Go's map order and math/rand inside the guest. It never
// yields all-zero output (Go falls back to a clock-derived seed when it does).
type seededStream struct{ state uint64 }

func newSeededStream(seed uint64) *seededStream {
	return &seededStream{state: seed ^ 0x9E3779B97F4A7C15}
}

func (s *seededStream) next() uint64 {
	s.state += 0x9E3779B97F4A7C15
	z := s.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func (s *seededStream) Read(p []byte) (int, error) {
	var buf [8]byte
	for n := 0; n < len(p); n += 8 {
		binary.LittleEndian.PutUint64(buf[:], s.next()|1)
		copy(p[n:], buf[:])
	}
	return len(p), nil
}

// switchableStream is the guest's random source: a fixed stream while
// _initialize runs, then the match seed's (reseed).
type switchableStream struct{ s *seededStream }

func (w *switchableStream) reseed(seed uint64) { w.s = newSeededStream(seed) }

func (w *switchableStream) Read(p []byte) (int, error) { return w.s.Read(p) }

// cappedAllocator backs linear memory with a Go slice that refuses to grow past
// limit bytes: memory.grow then returns -1 in the guest.
type cappedAllocator uint64

func (c cappedAllocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	return &cappedMemory{limit: min(uint64(c), max)}
}

type cappedMemory struct {
	limit uint64
	buf   []byte
}

func (m *cappedMemory) Reallocate(size uint64) []byte {
	if size > m.limit && size > uint64(len(m.buf)) {
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	c := min(max(size, uint64(cap(m.buf))*5/4), m.limit)
	nb := make([]byte, size, max(c, size))
	copy(nb, m.buf)
	m.buf = nb
	return nb
}

func (m *cappedMemory) Free() { m.buf = nil }

// flagWatch arms a timer per call that sets the instance's flag global at the
// deadline (InterruptFlag).
type flagWatch struct {
	flag  api.MutableGlobal
	state atomic.Int32 // 0 idle, 1 in a call, 2 interrupted
	timer *time.Timer
}

func newFlagWatch(g api.MutableGlobal) *flagWatch {
	w := &flagWatch{flag: g}
	w.timer = time.AfterFunc(time.Hour, func() {
		if w.state.CompareAndSwap(1, 2) {
			w.flag.Set(1)
		}
	})
	w.timer.Stop()
	return w
}

func (w *flagWatch) call(ctx context.Context, fn api.Function, s []uint64, d time.Duration) error {
	w.state.Store(1)
	w.timer.Reset(d)
	err := fn.CallWithStack(ctx, s)
	w.timer.Stop()
	if !w.state.CompareAndSwap(1, 0) { // the timer fired: the call overran
		if err == nil {
			err = ErrDeadline
		} else {
			err = fmt.Errorf("%w: %v", ErrDeadline, err)
		}
	}
	return err
}
