package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/games/builtin"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ops/devstack"
	"ludus.dev/ludus/ops/modulewatch"
	"ludus.dev/ludus/simnode/engine"
)

// TestWatchedModule: `ludus dev --watch` uploads every rebuild; a game created
// after an upload runs the new build while a game created before keeps its own.
func TestWatchedModule(t *testing.T) {
	dir := t.TempDir()
	for name, wasm := range map[string][]byte{"first.bin": builtin.Pong, "second.bin": builtin.Arena} {
		if err := os.WriteFile(filepath.Join(dir, name), wasm, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The "compiler" copies the module that choice.json names.
	writeChoice := func(which string) {
		if err := os.WriteFile(filepath.Join(dir, "choice.json"), []byte(which), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeChoice("first.bin")
	if err := os.WriteFile(filepath.Join(dir, "build.sh"), []byte("set -e\ncp \"$(cat choice.json)\" watched.wasm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := &modulewatch.Watcher{Dir: dir, Name: "watched", Every: 20 * time.Millisecond, Settle: 40 * time.Millisecond,
		Upload: func(ctx context.Context, name string, wasm []byte) (string, error) {
			return stack.Backend.EnsureModule(ctx, stack.TenantID, name, wasm)
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	builds := make(chan string)
	go w.Run(ctx, builds)
	wait := func() string {
		select {
		case b := <-builds:
			return b
		case <-ctx.Done():
			t.Fatal("no upload in time")
			return ""
		}
	}
	if got, want := wait(), engine.BuildID(builtin.Pong); got != want {
		t.Fatalf("first upload is build %s, want %s", got, want)
	}
	pl := login(t, protocols()[0], devstack.DemoTenant)
	before, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "watched"}))
	if err != nil {
		t.Fatal(err)
	}

	writeChoice("second.bin")
	if got, want := wait(), engine.BuildID(builtin.Arena); got != want {
		t.Fatalf("second upload is build %s, want %s", got, want)
	}
	after, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "watched", Bots: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if after.Msg.Game.BuildId != engine.BuildID(builtin.Arena) {
		t.Fatalf("a game created after the rebuild runs %s, want the new build", after.Msg.Game.BuildId)
	}
	list, err := pl.games.ListGames(ctx, connect.NewRequest(&ludusv1.ListGamesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range list.Msg.Games {
		if g.GameId == before.Msg.Game.GameId {
			found = true
			if g.BuildId != engine.BuildID(builtin.Pong) {
				t.Fatalf("the game created before the rebuild now runs %s; it must keep its build", g.BuildId)
			}
		}
	}
	if !found {
		t.Fatalf("game %s created before the rebuild is not listed", before.Msg.Game.GameId)
	}
}
