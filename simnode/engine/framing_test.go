package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/internal/wasmtest"
)

// TestValidateRefusesAllocationBombs: modules of a few hundred bytes whose
// counts or lengths claim gigabytes are refused at once. wazero's decoder
// allocates what they claim before reading: the data section below killed
// the test process ("fatal error: runtime: out of memory"), the export name
// took 17 s to refuse (FuzzValidate found it).
func TestValidateRefusesAllocationBombs(t *testing.T) {
	e := newEngine(t)
	valid := wasmtest.Module{Funcs: wasmtest.ABIFuncs(wasmtest.I64Const(0)), MemoryPages: 1, ExportMemory: true}.Bytes()
	huge := []byte{0xff, 0xff, 0xff, 0xff, 0x0f} // 2^32-1
	with := func(parts ...[]byte) []byte { return wasmtest.Cat(append([][]byte{valid}, parts...)...) }
	bombs := map[string][]byte{
		"data segments":    with(wasmtest.Section(11, huge)),
		"data init":        with(wasmtest.Section(11, wasmtest.Cat([]byte{1, 1}, huge))),
		"custom section":   wasmtest.Cat(valid, []byte{0}, huge, []byte("x")),
		"custom name":      with(wasmtest.Section(0, huge)),
		"tables":           wasmtest.Cat(valid[:8], wasmtest.Section(4, huge)),
		"types":            wasmtest.Cat(valid[:8], wasmtest.Section(1, huge)),
		"type parameters":  wasmtest.Cat(valid[:8], wasmtest.Section(1, wasmtest.Cat([]byte{1, 0x60}, huge))),
		"imports":          wasmtest.Cat(valid[:8], wasmtest.Section(2, huge)),
		"import name":      wasmtest.Cat(valid[:8], wasmtest.Section(2, wasmtest.Cat([]byte{1}, huge))),
		"exports":          wasmtest.Cat(valid[:8], wasmtest.Section(7, huge)),
		"function bodies":  wasmtest.Cat(valid[:8], wasmtest.Section(10, huge)),
		"function body":    wasmtest.Cat(valid[:8], wasmtest.Section(10, wasmtest.Cat([]byte{1}, huge))),
		"locals":           wasmtest.Cat(valid[:8], wasmtest.Section(10, []byte{1, 7, 2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x7f, 1, 0x7f, 0x0b})),
		"element segments": wasmtest.Cat(valid[:8], wasmtest.Section(9, huge)),
		"fuzzer's export name": []byte("\x00asm\x01\x00\x00\x00\x01&\b`\x00\x01\x7f`\x00\x01~`\x01\x7f\x01\x7f`\x02~\x7f\x01\x7f`\x01\x7f\x01\x7f`\x01\x7f\x01~" +
			"`\x00\x01~`\x00\x01~\x03\t\b\x00\x01\x02\x03\x04\x05\x06\a\a\x83\x01\xf3\xf3\xf3\xf3\x000\n0000000002\x000\n0000000007\x000\x1000000000000000\n"),
	}
	for name, wasm := range bombs {
		start := time.Now()
		_, err := e.Validate(context.Background(), wasm)
		if !errors.Is(err, ErrInvalidModule) {
			t.Errorf("%s: %v", name, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: refused after %v", name, took)
		}
	}
	for _, m := range append(builtinModules(), valid, wasmtest.Hostile("ludus_step", wasmtest.I32Const(0)), exitPaths()) {
		if err := checkFraming(m); err != nil {
			t.Errorf("a valid module: %v", err)
		}
	}
}

// TestStartFunctionHasADeadline: a module whose start function (run by
// wazero while it instantiates the module, before any call of the host's)
// never returns is stopped at the initialisation deadline, so validating an
// upload cannot hang.
func TestStartFunctionHasADeadline(t *testing.T) {
	e, err := New(context.Background(), Config{CacheDir: cacheDir, InitDeadline: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	wasm := wasmtest.Hostile("ludus_step", wasmtest.I32Const(0), wasmtest.Func{Body: wasmtest.Spin})
	// Insert a start section (function 8, the spin) before the code section.
	r := &wreader{b: wasm, off: 8}
	for !r.eof() {
		at := r.off
		id := r.byte()
		r.take(int(r.u32()))
		if id == 10 {
			wasm = wasmtest.Cat(wasm[:at], wasmtest.Section(8, []byte{8}), wasm[at:])
			break
		}
	}
	start := time.Now()
	_, err = e.Validate(context.Background(), wasm)
	if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("Validate: %v", err)
	}
	if took := time.Since(start); took > 200*time.Millisecond+slack {
		t.Fatalf("stopped after %v", took)
	}
}
