package modulewatch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is an Upload that keeps what it was given.
type recorder struct {
	mu    sync.Mutex
	wasms [][]byte
	fail  error
}

func (r *recorder) upload(_ context.Context, name string, wasm []byte) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return "", r.fail
	}
	r.wasms = append(r.wasms, append([]byte(nil), wasm...))
	sum := sha256.Sum256(wasm)
	return fmt.Sprintf("%x", sum), nil
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// project writes a directory whose build.sh "compiles" game.c by copying it to
// game.wasm, and fails when the source says "broken".
func project(t *testing.T, source string) string {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "build.sh"), "set -e\nif grep -q broken game.c; then echo 'game.c:1: error: broken' >&2; exit 1; fi\ncp game.c game.wasm\n")
	writeFile(t, filepath.Join(dir, "game.c"), source)
	return dir
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func next(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case b := <-ch:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no upload within 10 s")
		return ""
	}
}

func TestWatchRebuildsOnEveryChange(t *testing.T) {
	dir := project(t, "v1")
	rec := &recorder{}
	w := &Watcher{Dir: dir, Name: "snake", Every: 10 * time.Millisecond, Settle: 20 * time.Millisecond, Upload: rec.upload, Log: quietLog()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	builds := make(chan string)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, builds) }()

	first := next(t, builds)
	// A file the build writes (.wasm) must not trigger another build.
	writeFile(t, filepath.Join(dir, "notes.wasm"), "x")
	writeFile(t, filepath.Join(dir, "game.c"), "version two")
	second := next(t, builds)
	if first == second {
		t.Fatal("the second upload is the same build as the first")
	}
	rec.mu.Lock()
	got := []string{string(rec.wasms[0]), string(rec.wasms[1])}
	n := len(rec.wasms)
	rec.mu.Unlock()
	if got[0] != "v1" || got[1] != "version two" || n != 2 {
		t.Fatalf("uploads = %q (%d), want v1 then the edited source", got, n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWatchKeepsWatchingAfterABrokenBuild(t *testing.T) {
	dir := project(t, "broken")
	rec := &recorder{}
	w := &Watcher{Dir: dir, Name: "snake", Every: 10 * time.Millisecond, Settle: 20 * time.Millisecond, Upload: rec.upload, Log: quietLog()}
	if b := w.Rebuild(context.Background()); b != "" {
		t.Fatalf("a failing build.sh uploaded build %s", b)
	}
	_, err := w.build(context.Background())
	if err == nil || !strings.Contains(err.Error(), "game.c:1: error: broken") {
		t.Fatalf("build error = %v, want the compiler's own words", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	builds := make(chan string)
	go w.Run(ctx, builds)
	time.Sleep(50 * time.Millisecond)
	writeFile(t, filepath.Join(dir, "game.c"), "fixed")
	next(t, builds)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.wasms) != 1 || string(rec.wasms[0]) != "fixed" {
		t.Fatalf("uploads = %q, want only the fixed build", rec.wasms)
	}
}

func TestWatchReportsARefusedUpload(t *testing.T) {
	dir := project(t, "v1")
	rec := &recorder{fail: errors.New("module rejected: exports _start")}
	w := &Watcher{Dir: dir, Name: "snake", Upload: rec.upload, Log: quietLog()}
	if b := w.Rebuild(context.Background()); b != "" {
		t.Fatalf("refused upload returned build %q", b)
	}
}

func TestBuildNeedsARecipe(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "game.c"), "int x;")
	w := &Watcher{Dir: dir, Name: "x", Log: quietLog(), Now: time.Now}
	if _, err := w.build(context.Background()); !errors.Is(err, ErrNoBuildRecipe) {
		t.Fatalf("err = %v, want ErrNoBuildRecipe", err)
	}
	// A build.sh that writes no module is an error naming the directory.
	writeFile(t, filepath.Join(dir, "build.sh"), "true\n")
	if _, err := w.build(context.Background()); err == nil || !strings.Contains(err.Error(), "no new .wasm") {
		t.Fatalf("err = %v, want 'no new .wasm'", err)
	}
}

func TestNameFor(t *testing.T) {
	for dir, want := range map[string]string{
		"/tmp/Snake Game": "snake-game",
		"/tmp/my_game.v2": "my_game-v2",
		"/tmp/ü":          "",
	} {
		if got := NameFor(dir); got != want {
			t.Errorf("NameFor(%q) = %q, want %q", dir, got, want)
		}
	}
}
