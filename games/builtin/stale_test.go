package builtin

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestArenaUpToDate rebuilds the arena module with the exact command of
// games/build.sh and compares it with the embedded bytes. The build is
// reproducible for a given Go toolchain; a different Go version legitimately
// produces different bytes, so rebuild with the toolchain go.mod selects.
func TestArenaUpToDate(t *testing.T) { checkGoModule(t, "arena.wasm", "./games/arena/module", Arena) }

func TestDensityGoUpToDate(t *testing.T) {
	checkGoModule(t, "density-go.wasm", "./games/density/module", DensityGo)
}

func checkGoModule(t *testing.T, name, pkg string, embedded []byte) {
	t.Parallel()
	if testing.Short() {
		t.Skip("rebuilding the wasm module is slow")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-ldflags=-buildid=",
		"-o", out, pkg)
	cmd.Dir = "../.." // the repo root, as in games/build.sh
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, embedded) {
		t.Fatalf("games/builtin/%s is stale: run bash games/build.sh (rebuilt %d bytes with %s, embedded %d bytes)",
			name, len(got), runtime.Version(), len(embedded))
	}
}

// TestCModulesUpToDate rebuilds the C modules with the command of games/build.sh
// (skipped where clang is not installed).
func TestCModulesUpToDate(t *testing.T) {
	if _, err := exec.LookPath("clang"); err != nil {
		t.Skip("clang is not installed (Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32)")
	}
	for _, c := range []struct {
		name, src string
		embedded  []byte
	}{
		{"pong-c.wasm", "games/pong-c/pong.c", Pong},
		{"density-c.wasm", "games/density/c/density.c", DensityC},
	} {
		out := filepath.Join(t.TempDir(), c.name)
		cmd := exec.Command("clang", "--target=wasm32-wasi", "-O2", "-mexec-model=reactor", "-Igames/c",
			"-Wl,-z,stack-size=16384", "-Wl,--strip-debug", "-o", out, c.src)
		cmd.Dir = "../.."
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, msg)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, c.embedded) {
			t.Errorf("games/builtin/%s is stale: run bash games/build.sh (rebuilt %d bytes, embedded %d bytes)", c.name, len(got), len(c.embedded))
		}
	}
}
