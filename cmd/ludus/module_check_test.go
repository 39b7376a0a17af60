package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestModuleCheckBuiltin: the shipped modules pass, through the ctl dispatch.
func TestModuleCheckBuiltin(t *testing.T) {
	for _, f := range []string{"pong-c.wasm", "density-c.wasm"} {
		var out bytes.Buffer
		err := runCtl(context.Background(), []string{"module", "check", filepath.Join("..", "..", "games", "builtin", f), "--ticks", "200"}, &out)
		if err != nil {
			t.Fatalf("%s: %v\n%s", f, err, out.String())
		}
		if !strings.Contains(out.String(), "valid module") || !strings.Contains(out.String(), "OK ") {
			t.Errorf("%s: output\n%s", f, out.String())
		}
	}
}

// TestModuleCheckFailures: a Go module whose View changes its state (built
// from simnode/engine/enginecheck/testdata/buggy) fails with the tick and the
// cause; bad arguments and files are refused.
func TestModuleCheckFailures(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "one FILE.wasm expected"},
		{[]string{"a.wasm", "b.wasm"}, "one FILE.wasm expected"},
		{[]string{"x.wasm", "--ticks", "0"}, "--ticks must be"},
		{[]string{filepath.Join(t.TempDir(), "missing.wasm")}, "no such file"},
		{[]string{"module_check.go"}, "invalid module"},
	} {
		err := runModuleCheck(ctx, c.args, new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("module check %q: %v; want %q", c.args, err, c.want)
		}
	}

	if testing.Short() {
		t.Skip("building a Go wasm module is slow")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	wasm := filepath.Join(t.TempDir(), "buggy.wasm")
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-o", wasm, "./simnode/engine/enginecheck/testdata/buggy")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, msg)
	}
	var out bytes.Buffer
	if err := runModuleCheck(ctx, []string{wasm, "--ticks", "100"}, &out); err != nil {
		t.Fatalf("the module without its bug: %v", err)
	}
	err := runModuleCheck(ctx, []string{wasm, "--config", `{"bug":"view"}`, "--ticks", "100"}, &out)
	if err == nil {
		t.Fatal("a module whose View changes state passed")
	}
	for _, want := range []string{"tick 1,", "run calling View", "View changed game state"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%v", want, err)
		}
	}
	err = runModuleCheck(ctx, []string{wasm, "--config", `{"bug":"save"}`, "--ticks", "100"}, &out)
	if err == nil || !strings.Contains(err.Error(), "Save/Load lost state") {
		t.Errorf("a module whose Save drops a field: %v", err)
	}
}
