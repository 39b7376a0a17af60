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
func TestArenaUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("rebuilding the wasm module is slow")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	out := filepath.Join(t.TempDir(), "arena.wasm")
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-ldflags=-buildid=",
		"-o", out, "./games/arena/module")
	cmd.Dir = "../.." // the repo root, as in games/build.sh
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, Arena) {
		t.Fatalf("games/builtin/arena.wasm is stale: run bash games/build.sh (rebuilt %d bytes with %s, embedded %d bytes)",
			len(got), runtime.Version(), len(Arena))
	}
}
