package engine

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
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
