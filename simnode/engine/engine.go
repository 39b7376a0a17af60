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

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"ludus.dev/ludus/sdk/abi"
)

// Config configures an Engine. The zero value is usable: no compilation cache and
// a 512-page (32 MiB) memory cap per instance.
type Config struct {
	// CacheDir, if set, keeps compiled machine code on disk across restarts
	// (compiling a 2 MB Go module takes seconds; loading it from the cache, milliseconds).
	CacheDir string
	// MemoryLimitPages caps each instance's linear memory in 64 KiB pages.
	// Default 512 (32 MiB).
	MemoryLimitPages uint32
}

// Engine compiles and instantiates game modules. It is safe for concurrent use.
type Engine struct {
	rt    wazero.Runtime
	cache wazero.CompilationCache

	mu      sync.Mutex
	modules map[string]*Module // by build id
}

// New creates an Engine using wazero's compiler (never the interpreter: it is
// ~100× slower on a raycaster).
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.MemoryLimitPages == 0 {
		cfg.MemoryLimitPages = 512
	}
	rc := wazero.NewRuntimeConfigCompiler().WithMemoryLimitPages(cfg.MemoryLimitPages)
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
	return &Engine{rt: rt, cache: cache, modules: map[string]*Module{}}, nil
}

// Close releases every compiled module and instance.
func (e *Engine) Close(ctx context.Context) error {
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

	eng      *Engine
	compiled wazero.CompiledModule
}

// ErrInvalidModule wraps every reason a module is refused; its message is meant
// for the studio engineer who uploaded it.
var ErrInvalidModule = errors.New("invalid module")

// Compile validates wasm against ABI v1 and compiles it, or returns the module
// already compiled for the same bytes.
func (e *Engine) Compile(ctx context.Context, wasm []byte) (*Module, error) {
	id := BuildID(wasm)
	e.mu.Lock()
	m, ok := e.modules[id]
	e.mu.Unlock()
	if ok {
		return m, nil
	}
	compiled, err := e.rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: not a valid WebAssembly module: %v", ErrInvalidModule, err)
	}
	hasCheckpoint, err := checkShape(compiled)
	if err != nil {
		compiled.Close(ctx)
		return nil, err
	}
	m = &Module{BuildID: id, HasCheckpoint: hasCheckpoint, eng: e, compiled: compiled}
	meta, err := m.readMeta(ctx)
	if err != nil {
		compiled.Close(ctx)
		return nil, err
	}
	m.Meta = meta
	e.mu.Lock()
	if prev, ok := e.modules[id]; ok { // lost a race with another Compile of the same bytes
		e.mu.Unlock()
		compiled.Close(ctx)
		return prev, nil
	}
	e.modules[id] = m
	e.mu.Unlock()
	return m, nil
}

// readMeta instantiates the module once to ask its ABI version and metadata.
func (m *Module) readMeta(ctx context.Context) (abi.Meta, error) {
	inst, err := m.instantiate(ctx, 1)
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
	meta, err := abi.ParseMeta(b)
	if err != nil {
		return abi.Meta{}, fmt.Errorf("%w: %v", ErrInvalidModule, err)
	}
	return meta, nil
}

// Validate checks wasm against ABI v1 and returns its metadata. It is what the
// backend calls on upload.
func (e *Engine) Validate(ctx context.Context, wasm []byte) (abi.Meta, error) {
	m, err := e.Compile(ctx, wasm)
	if err != nil {
		return abi.Meta{}, err
	}
	return m.Meta, nil
}

// Module returns a module compiled earlier by build id.
func (e *Engine) Module(buildID string) (*Module, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m, ok := e.modules[buildID]
	return m, ok
}
