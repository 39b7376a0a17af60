package engine

import (
	"bytes"
	"context"
	"testing"

	"github.com/tetratelabs/wazero"

	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/internal/wasmtest"
)

// TestInstrumentPreservesBehaviour: the arena computes the same state hashes
// with and without the rewriting, and with either probe.
func TestInstrumentPreservesBehaviour(t *testing.T) {
	var want []uint64
	for _, mode := range []Interrupt{InterruptNone, InterruptFuel, InterruptFlag} {
		e, err := New(context.Background(), Config{CacheDir: cacheDir, Interrupt: mode})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := runArenaOn(t, e, 11, 300)
		e.Close(context.Background())
		if want == nil {
			want = got
			continue
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%v: state hash of tick %d differs from the uninstrumented module", mode, i+1)
			}
		}
	}
}

func TestInstrumentRefusesHostImports(t *testing.T) {
	e := newEngine(t)
	wasm := wasmtest.Module{Imports: []wasmtest.Import{{Module: hostModule, Name: hostRefill}},
		Funcs: wasmtest.ABIFuncs(wasmtest.I64Const(0)), MemoryPages: 1, ExportMemory: true}.Bytes()
	if _, err := e.Validate(context.Background(), wasm); err == nil || !bytes.Contains([]byte(err.Error()), []byte("reserved for the host")) {
		t.Fatalf("Validate: %v", err)
	}
}

// FuzzInstrument: the rewriter never panics, and whatever wazero accepts it
// turns into a module wazero still accepts.
func FuzzInstrument(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add(wasmtest.Module{Funcs: wasmtest.ABIFuncs(wasmtest.I64Const(0)), MemoryPages: 1, ExportMemory: true}.Bytes())
	f.Add(wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.Spin, wasmtest.I32Const(0))))
	f.Add(wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.I32Const(62), []byte{0x10, 0x08}, wasmtest.I32Const(0)), recFunc))
	f.Add(wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.Spin[:2], fillSpin[2:], wasmtest.I32Const(0))))
	f.Add(exitPaths())
	f.Add(wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.I32Const(3), []byte{0x10, 0x08}, bytesOf(0x1a, 3), wasmtest.I32Const(0)), shapeArity(3)))
	f.Add(wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.I32Const(3), []byte{0x10, 0x08}, wasmtest.I32Const(0)), shapeIf(3, 3)))
	f.Add(wasmtest.Module{Imports: []wasmtest.Import{{Module: "wasi_snapshot_preview1", Name: "sched_yield", Results: []byte{wasmtest.I32}}},
		Funcs: wasmtest.ABIFuncs(wasmtest.I64Const(0)), MemoryPages: 1, ExportMemory: true}.Bytes())
	for _, m := range builtinModules() {
		if len(m) < 64<<10 {
			f.Add(m)
		}
	}
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	f.Cleanup(func() { r.Close(ctx) })
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkFraming(b) != nil {
			return // wazero would allocate what the bytes claim (TestValidateRefusesAllocationBombs)
		}
		for _, code := range []interruptCode{codeFuel, codeFlag} {
			out, err := instrument(b, code)
			if err != nil {
				continue
			}
			orig, err := r.CompileModule(ctx, b)
			if err != nil {
				continue
			}
			orig.Close(ctx)
			c, err := r.CompileModule(ctx, out)
			if err != nil {
				t.Fatalf("instrumented (%d) module is invalid: %v", code, err)
			}
			c.Close(ctx)
		}
	})
}

// builtinModules are the embedded modules, as fuzz seeds.
func builtinModules() [][]byte { return [][]byte{builtin.Arena, builtin.Pong, builtin.DensityC} }
