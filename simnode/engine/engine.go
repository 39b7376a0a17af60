// Package engine hosts Ludus game modules in wazero: it validates a module against
// ABI v1 (docs/ABI.md), compiles it once per build id with the compiler engine and
// a compilation cache, and runs instances of it with a deterministic host — clocks
// derived from the tick, randomness from the match seed, no filesystem, no network.
//
// An Instance is not safe for concurrent use: a match's instance is owned by the
// goroutine of that match's actor (see package simnode).
package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"ludus.dev/ludus/sdk/abi"
)

// Config configures an Engine. The zero value is usable: no compilation cache,
// a 512-page (32 MiB) memory cap per instance, fuel-based interruption with a
// 250 ms deadline per call (5 s for initialisation) and a call stack budget of
// StackLimit per instance.
type Config struct {
	// CacheDir, if set, keeps compiled machine code on disk across restarts
	// (compiling a 2 MB Go module takes seconds; loading it from the cache, milliseconds).
	CacheDir string
	// MemoryLimitPages caps each instance's linear memory in 64 KiB pages.
	// Default 512 (32 MiB). It is also the ceiling of InstanceOptions.MemoryLimitPages.
	MemoryLimitPages uint32

	// Interrupt selects how a guest stuck in a loop is stopped (default
	// InterruptFuel; see docs/RATIONALE.md). The other values exist to measure.
	Interrupt Interrupt
	// CallDeadline bounds every call into a guest: ludus_step, ludus_view, ... A
	// call that runs longer fails with ErrDeadline and the instance is closed.
	// Default 250 ms. With InterruptNone it is not enforced. With InterruptFuel
	// (the default) on Linux it counts the CPU time of the guest's thread, and a
	// starved call stops at starvedCallLimit times it of wall time (budget.go);
	// otherwise it is wall-clock time.
	CallDeadline time.Duration
	// InitDeadline bounds _initialize, ludus_init and ludus_load (counted as
	// CallDeadline is). Default 5 s.
	InitDeadline time.Duration
}

// Interrupt is a mechanism to stop a runaway guest.
type Interrupt int

const (
	// InterruptFuel rewrites the module at compile time: function entries and loop
	// headers count down a fuel global and, when it runs out (every ~10^6
	// instructions), call the host, which checks the call's deadline. Cheapest
	// mechanism that still interrupts (docs/RATIONALE.md).
	InterruptFuel Interrupt = iota
	// InterruptFlag rewrites the module to test a flag global at function entries
	// and loop headers; a timer sets the flag at the deadline. Cheaper per check,
	// but the timer cannot fire when every P of the Go scheduler is running a
	// runaway guest, nor while a garbage collection waits to stop the world (a
	// guest spinning in compiled code cannot be preempted, so the process hangs).
	// For measuring well-behaved modules only.
	InterruptFlag
	// InterruptWazero uses wazero's WithCloseOnContextDone and a context deadline
	// per call (~10× slower on loop-heavy code).
	InterruptWazero
	// InterruptNone runs guests unchecked: a runaway guest hangs its goroutine
	// forever. For benchmarks only.
	InterruptNone
)

func (i Interrupt) String() string {
	switch i {
	case InterruptFuel:
		return "fuel"
	case InterruptFlag:
		return "flag"
	case InterruptWazero:
		return "wazero"
	case InterruptNone:
		return "none"
	}
	return fmt.Sprintf("Interrupt(%d)", int(i))
}

// Engine compiles and instantiates game modules. It is safe for concurrent use.
type Engine struct {
	rt    wazero.Runtime
	cache wazero.CompilationCache
	cfg   Config
	epoch time.Time // the monotonic clock of deadlines counts from here
	// threadCPU reads the CPU time the calling OS thread has used, in
	// nanoseconds (cputime_linux.go); nil where the platform has no such clock,
	// and call deadlines are then wall-clock time. Tests replace it to starve
	// a guest's thread on demand.
	threadCPU func() int64
	// budgets holds each fuel-mode instance's call budget by its module, for
	// refill, which is given the module only.
	budgets sync.Map // api.Module → *callBudget

	mu      sync.Mutex
	modules map[string]*Module // by build id
	closed  chan struct{}
	// fillers are the warm pools' goroutines; Close waits for them so that no
	// instantiation is under way when the runtime closes.
	fillers sync.WaitGroup
}

// New creates an Engine using wazero's compiler (never the interpreter: it is
// ~100× slower on a raycaster).
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.MemoryLimitPages == 0 {
		cfg.MemoryLimitPages = 512
	}
	if cfg.CallDeadline <= 0 {
		cfg.CallDeadline = 250 * time.Millisecond
	}
	if cfg.InitDeadline <= 0 {
		cfg.InitDeadline = 5 * time.Second
	}
	rc := wazero.NewRuntimeConfigCompiler().WithMemoryLimitPages(cfg.MemoryLimitPages)
	if cfg.Interrupt == InterruptWazero {
		rc = rc.WithCloseOnContextDone(true)
	}
	var cache wazero.CompilationCache
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("engine: compilation cache in %s: %w", cfg.CacheDir, err)
		}
		cache = c
		rc = rc.WithCompilationCache(c)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("engine: instantiate WASI: %w", err)
	}
	e := &Engine{rt: rt, cache: cache, cfg: cfg, epoch: time.Now(), threadCPU: threadCPUClock(), modules: map[string]*Module{}, closed: make(chan struct{})}
	if _, err := rt.NewHostModuleBuilder(hostModule).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(e.refill), nil, nil).Export(hostRefill).
		Instantiate(ctx); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("engine: instantiate host module: %w", err)
	}
	return e, nil
}

// refillQuantum is the fuel given at each refill: the number of (weighted)
// instructions between two looks at the clock. Weights overestimate, so in
// practice the clock is read every ~50-200 µs of guest time; a hostile loop
// body made of the costliest instructions still reaches a check within ~10 ms.
const refillQuantum = 1 << 22

// errDeadline and errStackOverflow are what refill panics with; wazero turns
// them into the call's error.
var errDeadline, errStackOverflow = ErrDeadline, ErrStackOverflow

// refill is ludus_engine.refill, called by instrumented code when its fuel runs
// out or a call overdrew its stack budget: it fails the call in the latter case
// or once its deadline passed, else it refills the fuel.
func (e *Engine) refill(_ context.Context, mod api.Module, _ []uint64) {
	switch dl := int64(mod.ExportedGlobal(deadlineExport).Get()); {
	case dl == 0:
		// No call of the host's has set a deadline: this is the module's start
		// function, run while wazero instantiates it. It gets _initialize's.
		mod.ExportedGlobal(deadlineExport).(api.MutableGlobal).Set(uint64(e.now() + int64(e.cfg.InitDeadline)))
	default:
		if b, ok := e.budgets.Load(mod); ok {
			b.(*callBudget).check(e, mod, dl)
		} else if e.now() > dl {
			panic(errDeadline)
		}
	}
	if int64(mod.ExportedGlobal(stackExport).Get()) < 0 {
		panic(errStackOverflow)
	}
	mod.ExportedGlobal(counterExport).(api.MutableGlobal).Set(refillQuantum)
}

// now is the engine's monotonic clock in nanoseconds (never 0).
func (e *Engine) now() int64 { return int64(time.Since(e.epoch)) + 1 }

// Close releases every compiled module and instance.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	select {
	case <-e.closed:
	default:
		close(e.closed)
	}
	e.mu.Unlock()
	e.fillers.Wait()
	err := e.rt.Close(ctx)
	if e.cache != nil {
		e.cache.Close(ctx)
	}
	return err
}

// BuildID returns the build id of a module: the lowercase hex SHA-256 of its bytes.
func BuildID(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return hex.EncodeToString(sum[:])
}

// Module is a validated, compiled game module.
type Module struct {
	BuildID string
	Meta    abi.Meta
	// HasCheckpoint reports whether the module exports ludus_save and ludus_load.
	HasCheckpoint bool
	// HasRenderer reports whether the module's views are snapshots: it declares
	// Meta.SnapshotFormat and exports ludus_render (Compile refuses a module
	// that declares one without the other), so NewRenderer can draw its views.
	// A ludus_render exported without a snapshot_format — every module built
	// with the Go SDK has one — is ignored: HasRenderer is false.
	HasRenderer bool

	eng      *Engine
	compiled wazero.CompiledModule
	minPages uint32

	poolMu sync.Mutex
	pools  map[InstanceOptions]*pool

	// live counts the instances not closed (warm ones included), used is
	// when the module was last looked up or instantiated (Engine.now), and
	// evicted is set once EvictIdle closed it.
	live    atomic.Int64
	used    atomic.Int64
	evicted atomic.Bool
}

// DefaultModuleIdle is how long the engine's users (sim nodes, batch
// workers) keep a build compiled after its last use before EvictIdle
// releases it.
const DefaultModuleIdle = 15 * time.Minute

// errEvicted refuses an instance of a module EvictIdle closed; look the
// build up again (Compile).
var errEvicted = errors.New("the module was unused and has been released; compile it again")

// EvictIdle releases the compiled modules nothing has used for idle: no
// instance of them is alive (warm ones included) and none was looked up
// (Compile, Module) or instantiated since. A node runs the builds its
// tenants upload, one after another as studios iterate, and each kept
// compiled holds megabytes of machine code for the process's life. It
// returns the build ids released; a later Compile of one compiles it again
// (from the compilation cache, when the engine has one).
func (e *Engine) EvictIdle(ctx context.Context, idle time.Duration) []string {
	now := e.now()
	var gone []*Module
	e.mu.Lock()
	for id, m := range e.modules {
		if m.live.Load() == 0 && now-m.used.Load() >= int64(idle) {
			delete(e.modules, id)
			m.evicted.Store(true)
			gone = append(gone, m)
		}
	}
	e.mu.Unlock()
	ids := make([]string, 0, len(gone))
	for _, m := range gone {
		m.stopPools()
		m.compiled.Close(ctx)
		ids = append(ids, m.BuildID)
	}
	return ids
}

// compile instruments wasm for the engine's interruption mechanism and compiles it.
func (e *Engine) compile(ctx context.Context, wasm []byte) (wazero.CompiledModule, error) {
	if err := checkFraming(wasm); err != nil {
		if isRefusal(err) {
			return nil, fmt.Errorf("%w: %v", ErrInvalidModule, err)
		}
		return nil, fmt.Errorf("%w: not a valid WebAssembly module: %v", ErrInvalidModule, err)
	}
	code := wasm
	if e.cfg.Interrupt == InterruptFuel || e.cfg.Interrupt == InterruptFlag {
		ic := codeFuel
		if e.cfg.Interrupt == InterruptFlag {
			ic = codeFlag
		}
		out, err := instrument(wasm, ic)
		if errors.Is(err, errForbiddenHostImport) {
			return nil, fmt.Errorf("%w: the module %v", ErrInvalidModule, err)
		}
		if isRefusal(err) {
			return nil, fmt.Errorf("%w: %v", ErrInvalidModule, err)
		}
		if err != nil {
			// Let wazero explain what is wrong with the module, if it can.
			if c, cerr := e.rt.CompileModule(ctx, wasm); cerr != nil {
				return nil, fmt.Errorf("%w: not a valid WebAssembly module: %v", ErrInvalidModule, cerr)
			} else {
				c.Close(ctx)
			}
			return nil, fmt.Errorf("%w: the module cannot be prepared for interruption: %v", ErrInvalidModule, err)
		}
		code = out
	}
	compiled, err := e.rt.CompileModule(ctx, code)
	if err != nil {
		return nil, fmt.Errorf("%w: not a valid WebAssembly module: %v", ErrInvalidModule, err)
	}
	return compiled, nil
}

// ErrInvalidModule wraps every reason a module is refused; its message is meant
// for the studio engineer who uploaded it.
var ErrInvalidModule = errors.New("invalid module")

// Compile validates wasm against ABI v1 and compiles it, or returns the module
// already compiled for the same bytes.
func (e *Engine) Compile(ctx context.Context, wasm []byte) (*Module, error) {
	id := BuildID(wasm)
	if m, ok := e.Module(id); ok {
		return m, nil
	}
	m, err := e.compileModule(ctx, id, wasm)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	if prev, ok := e.modules[id]; ok { // lost a race with another Compile of the same bytes
		e.mu.Unlock()
		m.compiled.Close(ctx)
		return prev, nil
	}
	e.modules[id] = m
	e.mu.Unlock()
	return m, nil
}

// CompileTransient is Compile without the engine's cache: the module is
// the caller's, who closes it (Module.Close) once its instances are
// closed. For modules a process only checks (an upload, a batch run's
// configs): a module kept compiled holds megabytes for the process's life.
func (e *Engine) CompileTransient(ctx context.Context, wasm []byte) (*Module, error) {
	id := BuildID(wasm)
	if m, ok := e.Module(id); ok {
		return m, nil // Close leaves it be
	}
	return e.compileModule(ctx, id, wasm)
}

// Close releases a module from CompileTransient; a module the engine's
// cache holds (from Compile) stays.
func (m *Module) Close(ctx context.Context) {
	m.eng.mu.Lock()
	cached := m.eng.modules[m.BuildID] == m
	m.eng.mu.Unlock()
	if !cached {
		m.compiled.Close(ctx)
	}
}

// compileModule compiles wasm, checks its exports and reads its metadata.
func (e *Engine) compileModule(ctx context.Context, id string, wasm []byte) (*Module, error) {
	compiled, err := e.compile(ctx, wasm)
	if err != nil {
		return nil, err
	}
	sh, err := checkShape(compiled, e.cfg.Interrupt == InterruptFuel)
	if err != nil {
		compiled.Close(ctx)
		return nil, err
	}
	m := &Module{BuildID: id, HasCheckpoint: sh.hasCheckpoint, eng: e, compiled: compiled, pools: map[InstanceOptions]*pool{}}
	m.used.Store(e.now())
	if mem, ok := compiled.ExportedMemories()["memory"]; ok {
		m.minPages = mem.Min()
	}
	meta, err := m.readMeta(ctx, sh.hasRender)
	if err != nil {
		compiled.Close(ctx)
		return nil, err
	}
	m.Meta = meta
	m.HasRenderer = meta.SnapshotFormat != ""
	return m, nil
}

// readMeta instantiates the module once to ask its ABI version and metadata.
// A module declaring a snapshot format must export ludus_render (hasRender),
// and that must draw an empty snapshot — malformed input, which renderers
// must survive — as a frame of the declared size, on this instance where
// ludus_init never ran.
func (m *Module) readMeta(ctx context.Context, hasRender bool) (abi.Meta, error) {
	inst, err := m.instantiate(ctx, InstanceOptions{})
	if err != nil {
		return abi.Meta{}, fmt.Errorf("%w: instantiation failed: %v", ErrInvalidModule, err)
	}
	defer inst.Close(ctx)
	res, err := inst.call(ctx, inst.fnVersion)
	if err != nil {
		return abi.Meta{}, fmt.Errorf("%w: %s trapped: %v", ErrInvalidModule, abi.ExportABIVersion, err)
	}
	if v := int32(res); v != abi.Version {
		return abi.Meta{}, fmt.Errorf("%w: %s returned %d; this host supports ABI version %d", ErrInvalidModule, abi.ExportABIVersion, v, abi.Version)
	}
	b, err := inst.packed(ctx, inst.fnMeta)
	if err != nil {
		return abi.Meta{}, fmt.Errorf("%w: %s: %v", ErrInvalidModule, abi.ExportMeta, err)
	}
	if len(b) > abi.MaxMetaBytes {
		return abi.Meta{}, fmt.Errorf("%w: %s returned %d bytes; at most %d", ErrInvalidModule, abi.ExportMeta, len(b), abi.MaxMetaBytes)
	}
	meta, err := abi.ParseMeta(b)
	if err != nil {
		return abi.Meta{}, fmt.Errorf("%w: %v", ErrInvalidModule, err)
	}
	if meta.SnapshotFormat != "" {
		if !hasRender {
			return abi.Meta{}, fmt.Errorf("%w: the module declares snapshot_format %q but does not export %s%s, which draws its snapshots",
				ErrInvalidModule, meta.SnapshotFormat, abi.ExportRender, renderExport)
		}
		r := &Renderer{inst: inst, fn: inst.mod.ExportedFunction(abi.ExportRender), width: meta.ViewWidth, height: meta.ViewHeight}
		if _, err := r.Render(ctx, nil); err != nil {
			return abi.Meta{}, fmt.Errorf("%w: %s of an empty snapshot (renderers must draw malformed snapshots, without ludus_init): %v",
				ErrInvalidModule, abi.ExportRender, err)
		}
	}
	return meta, nil
}

// Validate checks wasm against ABI v1 and returns its metadata. It is what the
// backend calls on upload.
func (e *Engine) Validate(ctx context.Context, wasm []byte) (abi.Meta, error) {
	m, err := e.CompileTransient(ctx, wasm)
	if err != nil {
		return abi.Meta{}, err
	}
	m.Close(ctx)
	return m.Meta, nil
}

// Module returns a module compiled earlier by build id.
func (e *Engine) Module(buildID string) (*Module, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m, ok := e.modules[buildID]
	if ok {
		m.used.Store(e.now())
	}
	return m, ok
}
