package builtin

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/sdk/abi"
)

// compileArena returns a runtime with WASI and the compiled arena module.
func compileArena(t testing.TB) (wazero.Runtime, wazero.CompiledModule) {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	t.Cleanup(func() { r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	cm, err := r.CompileModule(ctx, Arena)
	if err != nil {
		t.Fatal(err)
	}
	return r, cm
}

// instance is one instantiated module with helpers for the ABI calls.
type instance struct {
	t     testing.TB
	ctx   context.Context
	mod   api.Module
	ticks int64 // ludus_step calls so far, for the clocks
}

func instantiate(t testing.TB, r wazero.Runtime, cm wazero.CompiledModule, seed uint64) *instance {
	t.Helper()
	ctx := context.Background()
	// Deterministic WASI as docs/ABI.md describes it: clocks derived from the
	// tick (1 s + tick/tick_rate, never 0, frozen within a tick) and a seeded
	// random stream.
	in := &instance{t: t, ctx: ctx}
	clock := func() int64 { return 1e9 + in.ticks*1e9/arena.TickRate }
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions("_initialize").
		WithNanotime(clock, 1).
		WithWalltime(func() (int64, int32) { ns := clock(); return ns / 1e9, int32(ns % 1e9) }, 1).
		WithRandSource(&seededReader{rand.New(rand.NewPCG(seed, 1))})
	mod, err := r.InstantiateModule(ctx, cm, cfg)
	if err != nil {
		t.Fatal(err)
	}
	in.mod = mod
	return in
}

type seededReader struct{ r *rand.Rand }

func (s *seededReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(s.r.Uint32())
	}
	return len(p), nil
}

func (in *instance) call(name string, args ...uint64) uint64 {
	in.t.Helper()
	if name == abi.ExportStep {
		in.ticks++
	}
	res, err := in.mod.ExportedFunction(name).Call(in.ctx, args...)
	if err != nil {
		in.t.Fatalf("%s: %v", name, err)
	}
	if len(res) == 0 {
		return 0
	}
	return res[0]
}

// put copies b into the module's scratch buffer.
func (in *instance) put(b []byte) uint64 {
	in.t.Helper()
	ptr := uint32(in.call(abi.ExportBuffer, uint64(len(b))))
	if ptr == 0 || !in.mod.Memory().Write(ptr, b) {
		in.t.Fatalf("ludus_buffer(%d) = %d", len(b), ptr)
	}
	return uint64(len(b))
}

// slice reads a packed slice result, copied out of linear memory.
func (in *instance) slice(packed uint64) []byte {
	in.t.Helper()
	ptr, n := abi.Unpack(packed)
	b, ok := in.mod.Memory().Read(ptr, n)
	if !ok {
		in.t.Fatalf("packed slice %#x is outside memory", packed)
	}
	return bytes.Clone(b)
}

func i32(v int32) uint64 { return api.EncodeI32(v) }
