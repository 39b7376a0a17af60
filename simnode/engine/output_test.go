package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/internal/wasmtest"
)

// buildGoModule builds the Go SDK module in testdata/NAME.
func buildGoModule(t *testing.T, name string) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("building a Go wasm module is slow")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	out := filepath.Join(t.TempDir(), name+".wasm")
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-o", out, "./testdata/"+name)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func talker(t *testing.T) (*Module, func(config string) (*Instance, error)) {
	t.Helper()
	ctx := context.Background()
	e, err := New(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(ctx) })
	m, err := e.Compile(ctx, buildGoModule(t, "talker"))
	if err != nil {
		t.Fatal(err)
	}
	return m, func(config string) (*Instance, error) {
		inst, err := m.Instantiate(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inst.Close(ctx) })
		return inst, inst.Init(ctx, 7, []byte(config))
	}
}

// TestGuestErrorsInModuleWords: a refused config, a panic and a module that
// never called sdk.Register fail with the module's own message.
func TestGuestErrorsInModuleWords(t *testing.T) {
	ctx := context.Background()
	_, start := talker(t)

	_, err := start(`{"fail":"unknown map \"dust3\""}`)
	var te *TrapError
	if !errors.As(err, &te) {
		t.Fatalf("Init: %v, want a TrapError", err)
	}
	if want := `module refused the config: unknown map "dust3" (Init returned 1)`; te.Reason() != want {
		t.Fatalf("Reason() = %q, want %q", te.Reason(), want)
	}

	inst, err := start(`{"panic_at":3}`)
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = inst.Step(ctx, nil)
	}
	if !errors.As(err, &te) || te.Tick != 3 {
		t.Fatalf("Step: %v, want a trap at tick 3", err)
	}
	if want := "module trapped at tick 3: talker: boom at tick 3 (wasm error: unreachable)"; te.Reason() != want {
		t.Fatalf("Reason() = %q, want %q", te.Reason(), want)
	}

	e, err := New(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	_, err = e.Compile(ctx, buildGoModule(t, "noregister"))
	if err == nil || !strings.Contains(err.Error(), "no game registered; call sdk.Register from an init function of package main (wasm error: unreachable") {
		t.Fatalf("a module without sdk.Register: %v; want the SDK's message naming the fix", err)
	}
}

// TestGuestOutputLines: lines reach the sink with the tick they were written
// at and their stream; a line without a newline ends with its call.
func TestGuestOutputLines(t *testing.T) {
	ctx := context.Background()
	_, start := talker(t)
	inst, err := start(`{"say":2}`)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []OutputLine
	inst.SetOutputSink(func(l OutputLine) {
		mu.Lock()
		got = append(got, l)
		mu.Unlock()
	})
	for range 5 {
		if _, err := inst.Step(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := []OutputLine{{0, false, "tick 0"}, {0, true, "warn 0"}, {2, false, "tick 2"}, {4, false, "tick 4"}, {4, true, "warn 4"}}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("lines %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestGuestOutputBounds(t *testing.T) {
	tick := int64(9)
	o := newGuestOutput(func() int64 { return tick })
	var got []OutputLine
	o.setSink(func(l OutputLine) { got = append(got, l) })
	o.beginCall()
	o.write([]byte(strings.Repeat("x", 3000)+"\r\nnext\x00line"), true)
	o.endCall()
	if len(got) != 2 {
		t.Fatalf("%d lines, want 2", len(got))
	}
	if l := got[0].Text; len(l) > MaxLineBytes || !strings.HasSuffix(l, "…") || got[0].Tick != 9 || !got[0].Stderr {
		t.Fatalf("long line: %d bytes, %+v", len(l), got[0].Tick)
	}
	if got[1].Text != "next\uFFFDline" {
		t.Fatalf("unfinished line %q", got[1].Text)
	}
}

func TestGuestMessage(t *testing.T) {
	for in, want := range map[string]string{
		"": "",
		"panic: boom [recovered]\n\ngoroutine 1 [running]:\nmain.f()\n": "boom",
		"runtime: out of memory\nfatal error: out of memory\n":          "fatal error: out of memory",
		"loading\nerror: unknown map\nbye\n":                            "unknown map",
		"just text\n\n":                                                 "just text",
		"error: " + strings.Repeat("é", 600):                            strings.Repeat("é", 254) + "…",
	} {
		if got := GuestMessage(in); got != want {
			t.Errorf("GuestMessage(%.40q) = %q, want %q", in, got, want)
		}
	}
}

// TestGuestOutputFlood: one call writing 16 MiB of newlines, in one fd_write
// of four 4 MiB pieces, returns within its deadline's reach: the call keeps
// MaxCallOutputLines lines, drops the rest unread and says so in one more
// line; the next call has its budget again. (Before the budget, the host
// split every newline into a line, ten seconds for this call.)
func TestGuestOutputFlood(t *testing.T) {
	ctx := context.Background()
	const piece, pieces = 4 << 20, 4
	const bufAddr = 1 << 16
	iovAddr := int32(wasmtest.DataAddr + 4096)
	var iov []byte
	for range pieces {
		iov = binary.LittleEndian.AppendUint32(iov, bufAddr)
		iov = binary.LittleEndian.AppendUint32(iov, piece)
	}
	fdWrite := wasmtest.Import{Module: "wasi_snapshot_preview1", Name: "fd_write", Params: []byte{wasmtest.I32, wasmtest.I32, wasmtest.I32, wasmtest.I32}, Results: []byte{wasmtest.I32}}
	step := wasmtest.Cat(
		wasmtest.I32Const(bufAddr), wasmtest.I32Const('\n'), wasmtest.I32Const(piece), []byte{0xfc, 0x0b, 0x00}, // memory.fill
		wasmtest.I32Const(1), wasmtest.I32Const(iovAddr), wasmtest.I32Const(pieces), wasmtest.I32Const(512), []byte{0x10, 0x00, 0x1a}, // fd_write; drop
		wasmtest.I32Const(0))
	funcs := wasmtest.ABIFuncs(wasmtest.HostileMetaBody())
	wasmtest.SetBody(funcs, "ludus_step", step)
	data := append([]byte(wasmtest.HostileMeta), make([]byte, 4096-len(wasmtest.HostileMeta))...)
	wasm := wasmtest.Module{Imports: []wasmtest.Import{fdWrite}, Funcs: funcs, MemoryPages: 80, ExportMemory: true, Data: append(data, iov...)}.Bytes()

	e := hostileEngine(t, InterruptFuel)
	inst := startHostile(t, e, wasm, InstanceOptions{MemoryLimitPages: 128})
	var mu sync.Mutex
	var lines []OutputLine
	inst.SetOutputSink(func(l OutputLine) {
		mu.Lock()
		lines = append(lines, l)
		mu.Unlock()
	})
	for call := range 2 {
		mu.Lock()
		lines = lines[:0]
		mu.Unlock()
		start := time.Now()
		if _, err := inst.Step(ctx, nil); err != nil {
			t.Fatalf("step %d: %v", call, err)
		}
		took := time.Since(start)
		mu.Lock()
		n, last := len(lines), lines[len(lines)-1].Text
		mu.Unlock()
		if n != MaxCallOutputLines+1 || !strings.Contains(last, "dropped") {
			t.Fatalf("step %d: %d lines, the last %q; want %d and a line saying what was dropped", call, n, last, MaxCallOutputLines+1)
		}
		if took > 2*time.Second {
			t.Fatalf("step %d took %v: the output budget did not stop the host's work", call, took)
		}
		t.Logf("step %d: %v, %d lines, %s", call, took, n, last)
	}
}
