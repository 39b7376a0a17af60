package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ops/devstack"
	"ludus.dev/ludus/simnode/engine"
)

// TestStudioFirstHour walks a studio's first hour end to end: `ludus new`
// writes a game, its build script builds it (offline, with the SDK copy the
// binary carries), it is uploaded, a game is created with the module's own
// config, and two players play it in Chromium from an invite link: the page
// shows the module's title, hint, keys and square aspect, its keys move the
// player, and the end of the match shows who won (web/e2e/firsthour.mjs).
//
// Twice: as written (the held keys are "state" inputs), and with the
// module's InputKind left out, as docs/GUIDE.md's first game does: an
// "event" game, whose inputs apply in order from seq 1, and which refuses
// the page's first input (numbered from the wall clock) with an InputGap
// the page must number on from. In both, one send fails on purpose
// (Unavailable) and no later input may be refused for a gap: an event
// input is sent again with its seq.
func TestStudioFirstHour(t *testing.T) {
	chromium, artifacts := browserSetup(t)
	bin := ludusBinary(t)
	t.Run("state inputs", func(t *testing.T) { firstHour(t, chromium, artifacts, bin, "gemrun", nil) })
	t.Run("event inputs", func(t *testing.T) {
		firstHour(t, chromium, t.TempDir(), bin, "gemevent", func(game []byte) []byte {
			const kind = " InputKind: abi.InputState,"
			if !bytes.Contains(game, []byte(kind)) {
				t.Fatalf("the scaffold's game.go declares no %q any more: this test shows nothing", kind)
			}
			return bytes.Replace(game, []byte(kind), nil, 1)
		})
	})
}

// firstHour is TestStudioFirstHour's walk-through of a game called name,
// its game.go changed by edit (nil: as written); the page's screenshots go
// to artifacts.
func firstHour(t *testing.T, chromium, artifacts, bin, name string, edit func(game []byte) []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), name)
	if out, err := exec.CommandContext(ctx, bin, "new", name, "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("ludus new: %v\n%s", err, out)
	}
	if edit != nil {
		src := filepath.Join(dir, "game.go")
		game, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(src, edit(game), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.CommandContext(ctx, "sh", "build.sh")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	wasm, err := os.ReadFile(filepath.Join(dir, name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	build2, err := stack.Backend.EnsureModule(ctx, stack.TenantID, name, wasm)
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	if build2 != engine.BuildID(wasm) {
		t.Fatalf("uploaded build %s, want %s", build2, engine.BuildID(wasm))
	}
	// The config passes through to the module untouched: a 30 s match. (Its
	// clock runs from now; with 10 s, a loaded CI machine's second player,
	// some 10 s of browser start-up and logins later, found it over.)
	host := login(t, protocols()[0], devstack.DemoTenant)
	g, err := host.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: name, Config: []byte(`{"time_limit_s":30}`)}))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	// A module that takes no bots says so.
	_, err = host.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: name, Bots: 1}))
	wantCode(t, err, connect.CodeInvalidArgument)

	script, _ := filepath.Abs("../web/e2e/firsthour.mjs")
	cmd := exec.CommandContext(ctx, "node", script, stack.GatewayURL+"/", artifacts, g.Msg.Game.GameId, name)
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Logf("%s%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("first-hour browser walk-through failed: %v", err)
	}
}
