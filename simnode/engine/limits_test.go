package engine

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/internal/wasmtest"
)

// withSection returns wasm with a section inserted before its first section
// of a higher id (wasmtest's modules have theirs in order).
func withSection(wasm []byte, id byte, body []byte) []byte {
	r := &wreader{b: wasm, off: 8}
	for !r.eof() {
		at := r.off
		sid := r.byte()
		r.take(int(r.u32()))
		if sid > id {
			return wasmtest.Cat(wasm[:at], wasmtest.Section(id, body), wasm[at:])
		}
	}
	return wasmtest.Cat(wasm, wasmtest.Section(id, body))
}

// funcrefTable is a table type: funcref, minimum min, no maximum.
func funcrefTable(min uint32) []byte { return wasmtest.Cat([]byte{0x70, 0x00}, wasmtest.LEB(min)) }

// compileBounded compiles wasm on e and fails the test if that takes more
// than took or allocates more than alloc bytes (in the whole process: the
// package's tests do not run in parallel).
func compileBounded(t *testing.T, e *Engine, wasm []byte, took time.Duration, alloc uint64) error {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := e.Compile(context.Background(), wasm)
	d := time.Since(start)
	runtime.ReadMemStats(&after)
	if d > took {
		t.Errorf("compile took %v (bound %v)", d, took)
	}
	if a := after.TotalAlloc - before.TotalAlloc; a > alloc {
		t.Errorf("compile allocated %d MiB (bound %d MiB)", a>>20, alloc>>20)
	}
	return err
}

// TestTableGrowIsRefused: a module whose code grows a table is refused when it
// is compiled, in both rewriting modes. wazero caps a table only at 2^32
// entries and a table lives outside the memory cap: a ludus_step growing a
// table by 2^26 entries a few times took 51 s and 4 GiB of the node's heap,
// and with 2^28 entries the process died ("fatal error: out of memory").
// Tables used without growing them still compile.
func TestTableGrowIsRefused(t *testing.T) {
	table := wasmtest.Vec(funcrefTable(1))
	// ref.func 0; i32.const 2^26; table.grow 0; drop
	grow := wasmtest.Cat([]byte{0xd2, 0x00}, wasmtest.I32Const(1<<26), []byte{0xfc, 0x0f, 0x00, 0x1a}, wasmtest.I32Const(0))
	// table.size 0; drop; table.fill 0 of (0, ref.func 0, 1)
	use := wasmtest.Cat([]byte{0xfc, 0x10, 0x00, 0x1a},
		wasmtest.I32Const(0), []byte{0xd2, 0x00}, wasmtest.I32Const(1), []byte{0xfc, 0x11, 0x00}, wasmtest.I32Const(0))
	for _, mode := range []Interrupt{InterruptFuel, InterruptFlag} {
		t.Run(mode.String(), func(t *testing.T) {
			e := hostileEngine(t, mode)
			err := compileBounded(t, e, withSection(wasmtest.Hostile("ludus_step", grow), 4, table), 2*time.Second, 64<<20)
			if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "table.grow") {
				t.Errorf("a module growing a table: compile returned %v, want a refusal naming table.grow", err)
			} else if strings.Contains(err.Error(), "not a valid WebAssembly module") || strings.Contains(err.Error(), "cannot be prepared") {
				t.Errorf("the refusal blames the module's validity: %v", err)
			} else {
				t.Log(err)
			}
			if _, err := e.Compile(context.Background(), withSection(wasmtest.Hostile("ludus_step", use), 4, table)); err != nil {
				t.Errorf("a module using a table without growing it: %v", err)
			}
		})
	}
}

// TestHugeTablesAreRefused: a module whose tables declare more than
// maxTableEntries entries in all, or more than maxTables tables, is refused
// before wazero sees it. wazero allocates a table's declared minimum (up to
// 2^27 entries, 1 GiB) for every instance, outside the memory cap; an
// imported table is never allocated (no host module exports one), but its
// minimum counts too, so the refusal says what the limit is.
func TestHugeTablesAreRefused(t *testing.T) {
	e := newEngine(t)
	base := wasmtest.Hostile("ludus_step", wasmtest.I32Const(0))
	importTable := func(min uint32) []byte {
		// The module has no imports: an import section of one table.
		return wasmtest.Vec(wasmtest.Cat(wasmtest.Str("env"), wasmtest.Str("table"), []byte{0x01}, funcrefTable(min)))
	}
	emptyTables := make([][]byte, maxTables+1)
	for i := range emptyTables {
		emptyTables[i] = funcrefTable(0)
	}
	for name, wasm := range map[string][]byte{
		"a table of 2^24 entries":              withSection(base, 4, wasmtest.Vec(funcrefTable(1<<24))),
		"a table of wazero's maximum, 2^27":    withSection(base, 4, wasmtest.Vec(funcrefTable(1<<27))),
		"a table one entry over":               withSection(base, 4, wasmtest.Vec(funcrefTable(maxTableEntries+1))),
		"two tables over together":             withSection(base, 4, wasmtest.Vec(funcrefTable(maxTableEntries/2+1), funcrefTable(maxTableEntries/2))),
		"an imported table of 2^24 entries":    withSection(base, 2, importTable(1<<24)),
		"imported and defined tables together": withSection(withSection(base, 2, importTable(maxTableEntries/2)), 4, wasmtest.Vec(funcrefTable(maxTableEntries/2+1))),
		"too many tables":                      withSection(base, 4, wasmtest.Vec(emptyTables...)),
		// A table with an initializer expression (0x40 0x00 tabletype expr):
		// read as a plain table type, its minimum would hide in what follows.
		"a table with an initializer": withSection(base, 4, wasmtest.Vec(wasmtest.Cat([]byte{0x40, 0x00}, funcrefTable(1<<24), []byte{0xd0, 0x70, 0x0b}))),
	} {
		t.Run(name, func(t *testing.T) {
			err := compileBounded(t, e, wasm, time.Second, 16<<20)
			if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "table") || strings.Contains(err.Error(), "instantiation failed") {
				t.Fatalf("compile returned %v, want a refusal naming the tables' limit", err)
			}
			if strings.Contains(err.Error(), "not a valid WebAssembly module") {
				t.Errorf("the refusal blames the module's validity: %v", err)
			}
			t.Log(err)
		})
	}
	// At the limit, a module compiles and instantiates.
	if err := compileBounded(t, e, withSection(base, 4, wasmtest.Vec(funcrefTable(maxTableEntries))), 5*time.Second, 64<<20); err != nil {
		t.Errorf("a table of %d entries: %v", maxTableEntries, err)
	}
}

// TestModuleLocalsAreBounded: a module whose functions declare more than
// maxModuleLocals locals in all is refused at once. Each function stays
// within maxLocals, but wazero keeps 8 bytes per local for as long as the
// compiled module lives: 2,000 functions of 50,000 locals (a 24 KB module)
// took 770 MiB to compile, and 10,000 ran the process out of memory.
func TestModuleLocalsAreBounded(t *testing.T) {
	e := newEngine(t)
	module := func(n int, extra uint32) []byte {
		var funcs []wasmtest.Func
		for i := 0; i < n; i++ {
			funcs = append(funcs, wasmtest.Func{NLocals: maxLocals, LocalType: wasmtest.I64})
		}
		if extra > 0 {
			funcs = append(funcs, wasmtest.Func{NLocals: extra, LocalType: wasmtest.I32})
		}
		return wasmtest.Hostile("ludus_step", wasmtest.I32Const(0), funcs...)
	}
	const full = maxModuleLocals / maxLocals
	for name, wasm := range map[string][]byte{
		"one local over":      module(full, maxModuleLocals%maxLocals+1),
		"ten times the bound": module(10*full, 0),
	} {
		t.Run(name, func(t *testing.T) {
			err := compileBounded(t, e, wasm, time.Second, 16<<20)
			if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "locals") {
				t.Fatalf("compile returned %v, want a refusal naming the locals", err)
			}
			if strings.Contains(err.Error(), "not a valid WebAssembly module") {
				t.Errorf("the refusal blames the module's validity: %v", err)
			}
			t.Log(err)
		})
	}
	// At the bound, a module compiles, in bounded time and memory (~8 bytes a
	// local in wazero).
	if err := compileBounded(t, e, module(full, maxModuleLocals%maxLocals), 10*time.Second, 64<<20); err != nil {
		t.Errorf("a module of %d locals in all: %v", maxModuleLocals, err)
	}
}

// TestFunctionTypesAreBounded: a type of more than 1,000 parameters or
// results, more than 10,000 types, or more than 50,000 parameters and
// results in all is refused at once, before wazero builds its keys (one
// type of 40,000 parameters took it 1.9 s and 2.4 GB).
func TestFunctionTypesAreBounded(t *testing.T) {
	e := hostileEngine(t, InterruptFuel)
	i32s := func(n int) []byte { return bytes.Repeat([]byte{wasmtest.I32}, n) }
	module := func(types ...[]byte) []byte {
		return wasmtest.Cat([]byte("\x00asm\x01\x00\x00\x00"), wasmtest.Section(1, wasmtest.Vec(types...)))
	}
	many := func(n int, typ []byte) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = typ
		}
		return out
	}
	for _, c := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"40,000 parameters", module(wasmtest.FuncType(i32s(40000), nil)), "40000 parameters"},
		{"1,001 results", module(wasmtest.FuncType(nil, i32s(1001))), "1001 results"},
		{"10,001 types", module(many(10001, wasmtest.FuncType(nil, nil))...), "10001 function types"},
		{"51 types of 1,000", module(many(51, wasmtest.FuncType(i32s(1000), nil))...), "in all"},
	} {
		err := compileBounded(t, e, c.wasm, time.Second, 64<<20)
		if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal saying %q", c.name, err, c.want)
		}
	}
}
