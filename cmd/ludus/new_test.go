package main

import (
	"bytes"
	"context"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"ludus.dev/ludus/simnode/engine"
)

// goCmd runs the go command of the toolchain running the test in dir, offline:
// a new project must build from its own files alone.
func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	cmd := exec.Command(gobin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// TestNewGoProject writes a Go project, then tests, vets and builds it
// offline, outside this module, and checks the module it builds: engine
// validation (as an upload) and `ludus ctl module check`.
func TestNewGoProject(t *testing.T) {
	if testing.Short() {
		t.Skip("building a project and a wasm module is slow")
	}
	dir := filepath.Join(t.TempDir(), "somewhere", "gem-race")
	var out bytes.Buffer
	if err := runNew([]string{"gem-race", "--dir", dir}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "wrote go project gem-race") {
		t.Errorf("output %q", out.String())
	}
	for _, f := range []string{"go.mod", "game.go", "game_test.go", "module/main.go", "build.sh", "README.md", ".gitignore",
		"ludus-sdk/go.mod", "ludus-sdk/sdk/sdk.go", "ludus-sdk/sdk/abi/abi.go", "ludus-sdk/sdk/sdktest/check.go"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "ludus-sdk", "sdk", "*_test.go"))
	if len(matches) > 0 {
		t.Errorf("the SDK copy has tests that need the Ludus tree: %v", matches)
	}
	for _, f := range []string{"game.go", "game_test.go", "module/main.go"} {
		src, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := format.Source(src); err != nil || !bytes.Equal(got, src) {
			t.Errorf("%s is not gofmt-ed (err %v)", f, err)
		}
	}
	readme, _ := os.ReadFile(filepath.Join(dir, "README.md"))
	for _, cmd := range []string{"go test ./...", "./build.sh", "ludus ctl module check gem-race.wasm", "ludus ctl module upload gem-race gem-race.wasm"} {
		if !strings.Contains(string(readme), cmd) {
			t.Errorf("README lacks %q", cmd)
		}
	}

	t.Log(goCmd(t, dir, nil, "test", "-count=1", "./..."))
	goCmd(t, dir, nil, "vet", "./...")
	build := exec.Command("sh", "./build.sh")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local",
		"PATH="+filepath.Join(runtime.GOROOT(), "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, msg)
	}
	wasmPath := filepath.Join(dir, "gem-race.wasm")
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := engine.New(ctx, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	meta, err := e.Validate(ctx, wasm)
	if err != nil {
		t.Fatalf("the new project's module does not validate: %v", err)
	}
	if meta.Name != "gem-race" || meta.MaxPlayers != 4 {
		t.Errorf("meta %+v", meta)
	}
	out.Reset()
	if err := runModuleCheck(ctx, []string{wasmPath, "--ticks", "300"}, &out); err != nil {
		t.Fatalf("module check: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "OK gem-race: 6 runs of 300 ticks") || !strings.Contains(out.String(), "checkpoint round trips") {
		t.Errorf("module check output:\n%s", out.String())
	}
}

// TestNewCProject writes a C project and compiles it: to wasm when clang can
// target wasm32-wasi, else only checks it natively with gcc or cc.
func TestNewCProject(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pc")
	var out bytes.Buffer
	if err := runNew([]string{"--lang", "c", "--dir", dir, "pixel-chase"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"game.c", "ludus.h", "build.sh", "README.md", ".gitignore"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
		t.Error("a C project got a go.mod")
	}
	src, _ := os.ReadFile(filepath.Join(dir, "game.c"))
	if !strings.Contains(string(src), `{\"name\":\"pixel-chase\"`) || strings.Contains(string(src), "{{") {
		t.Error("game.c does not declare the module name, or has template left")
	}
	if fi, err := os.Stat(filepath.Join(dir, "build.sh")); err != nil || fi.Mode()&0o100 == 0 {
		t.Errorf("build.sh is not executable: %v", err)
	}

	if clang, err := exec.LookPath("clang"); err == nil {
		probe := exec.Command(clang, "--target=wasm32-wasi", "-mexec-model=reactor", "-x", "c", "-o", filepath.Join(t.TempDir(), "p.wasm"), "-")
		probe.Stdin = strings.NewReader("int x;\n")
		if probe.Run() == nil {
			build := exec.Command("sh", "./build.sh")
			build.Dir = dir
			if msg, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build.sh: %v\n%s", err, msg)
			}
			out.Reset()
			if err := runModuleCheck(context.Background(), []string{filepath.Join(dir, "pixel-chase.wasm"), "--ticks", "300"}, &out); err != nil {
				t.Fatalf("module check: %v\n%s", err, out.String())
			}
			t.Log(out.String())
			return
		}
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			t.Skip("no clang with wasm32-wasi support and no C compiler: the C project is written but not compiled")
		}
	}
	// No wasm32-wasi clang here: compile natively to catch C errors at least
	// (export_name is a clang attribute, hence -Wno-attributes).
	cmd := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-attributes", "-c", "-o", filepath.Join(t.TempDir(), "game.o"), "game.c")
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, msg)
	}
	t.Logf("clang with wasm32-wasi is not available: compiled game.c natively with %s only", cc)
}

// TestScaffoldLudusHUpToDate: the C template's ludus.h is games/c/ludus.h.
func TestScaffoldLudusHUpToDate(t *testing.T) {
	want, err := os.ReadFile("../../games/c/ludus.h")
	if err != nil {
		t.Fatal(err)
	}
	got, err := scaffold.ReadFile("scaffold/c/ludus.h")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("cmd/ludus/scaffold/c/ludus.h differs from games/c/ludus.h: cp games/c/ludus.h cmd/ludus/scaffold/c/")
	}
}

func TestNewBadArguments(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "keep.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "a project name is required"},
		{[]string{""}, "a project name is required"},
		{[]string{"games/x"}, "is a path"},
		{[]string{`a\b`}, "is a path"},
		{[]string{".."}, "is a path"},
		{[]string{"Gems"}, "not valid"},
		{[]string{"1gems"}, "not valid"},
		{[]string{"gem--race"}, "not valid"},
		{[]string{"gem-"}, "not valid"},
		{[]string{"gem_race"}, "not valid"},
		{[]string{strings.Repeat("a", 33)}, "longer than 32"},
		{[]string{"gems", "more"}, "one project name expected"},
		{[]string{"gems", "--lang", "rust"}, `--lang "rust"`},
		{[]string{"gems", "--dir", full}, "exists and is not empty"},
		{[]string{"gems", "--bogus"}, "flag provided but not defined"},
	} {
		var out bytes.Buffer
		err := runNew(c.args, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ludus new %q: %v; want an error containing %q", c.args, err, c.want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(full, "keep.txt")); err != nil || string(b) != "mine" {
		t.Error("a refused ludus new touched the existing directory")
	}
	entries, _ := os.ReadDir(full)
	if len(entries) != 1 {
		t.Errorf("a refused ludus new wrote into %s: %v", full, entries)
	}
}

// TestNewIntoEmptyDir: an existing empty directory is fine, and the default
// directory is ./NAME.
func TestNewIntoEmptyDir(t *testing.T) {
	empty := t.TempDir()
	if err := runNew([]string{"gems", "--dir", empty, "--lang", "c"}, new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(empty, "game.c")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	if err := runNew([]string{"gems", "--lang=c"}, new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("gems", "build.sh")); err != nil {
		t.Fatal(err)
	}
	if err := runNew([]string{"gems"}, new(bytes.Buffer)); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("a second ludus new gems: %v; want a refusal", err)
	}
}
