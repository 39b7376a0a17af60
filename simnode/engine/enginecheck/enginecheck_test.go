package enginecheck

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/sdk/sdktest"
	"ludus.dev/ludus/simnode/engine"
)

// buildBuggy compiles testdata/buggy, a Go game whose config breaks it on purpose.
func buildBuggy(t *testing.T) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("building a Go wasm module is slow")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	out := filepath.Join(t.TempDir(), "buggy.wasm")
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-o", out, "./testdata/buggy")
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

func TestBuiltinModulesPass(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		wasm []byte
		o    sdktest.Options
	}{
		{"pong-c", builtin.Pong, sdktest.Options{Seed: 2, Players: 2, Ticks: 200}},
		{"density-c", builtin.DensityC, sdktest.Options{Seed: 3, Ticks: 100}},
		{"density-go", builtin.DensityGo, sdktest.Options{Seed: 3, Ticks: 100}},
		{"arena", builtin.Arena, sdktest.Options{Seed: 4, Players: 2, Ticks: 30, Config: []byte(`{"bots":2}`), CheckpointEvery: 15}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := Check(ctx, c.wasm, c.o)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Runs != 6 || rep.Ticks == 0 {
				t.Fatalf("report %+v", rep)
			}
			if c.name == "arena" && (rep.Frames == 0 || rep.Checkpoints == 0) {
				t.Errorf("arena: %v; want frames and checkpoints", rep)
			}
			t.Log(rep)
		})
	}
}

func TestBuggyModule(t *testing.T) {
	wasm := buildBuggy(t)
	ctx := context.Background()
	rep, err := Check(ctx, wasm, sdktest.Options{Seed: 1, Players: 4, Ticks: 120})
	if err != nil {
		t.Fatalf("the module without a bug: %v", err)
	}
	if rep.Checkpoints == 0 {
		t.Errorf("%v: want checkpoint round trips", rep)
	}
	for _, c := range []struct{ bug, run, cause string }{
		{"view", "views", sdktest.CauseViewMutates},
		{"save", "checkpoint", sdktest.CauseSaveLoad},
	} {
		_, err := Check(ctx, wasm, sdktest.Options{Seed: 1, Players: 4, Ticks: 120, Config: []byte(`{"bug":"` + c.bug + `"}`)})
		var d *sdktest.Divergence
		if !errors.As(err, &d) || d.Run != c.run || !strings.Contains(err.Error(), c.cause) {
			t.Errorf("bug %s: %v; want a divergence in the %s run naming %q", c.bug, err, c.run, c.cause)
		}
		t.Log(err)
	}
	// A config the game refuses is the game's error, with its stderr.
	_, err = Check(ctx, wasm, sdktest.Options{Config: []byte(`{"bug":7}`)})
	if !errors.Is(err, sdktest.ErrGame) || !strings.Contains(err.Error(), "wrong type") {
		t.Errorf("bad config: %v", err)
	}
}

func TestInvalidModule(t *testing.T) {
	_, err := Check(context.Background(), []byte("not wasm"), sdktest.Options{})
	if !errors.Is(err, engine.ErrInvalidModule) {
		t.Fatalf("Check(garbage) = %v; want ErrInvalidModule", err)
	}
}
