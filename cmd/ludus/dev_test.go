package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/sqlite"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/sdk/abi"
)

// devFleet is a fleet whose games are set by the test.
type devFleet struct {
	mu    sync.Mutex
	games []*ludusv1.GameInfo
}

func (f *devFleet) ListNodes(context.Context) ([]*ludusv1.Node, error) { return nil, nil }
func (f *devFleet) ListGames(context.Context, string) ([]*ludusv1.GameInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.games, nil
}
func (f *devFleet) ActiveBatchBuilds(context.Context, string) (map[string]string, error) {
	return nil, nil
}

// TestDevPrunesItsBuilds: a dev session that saves more times than the
// tenant may store builds never hits the bound: each upload deletes the
// module's builds older than the newest few, except one a live game runs;
// other modules of the tenant are untouched.
func TestDevPrunesItsBuilds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "ludus.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fleet := &devFleet{}
	srv, err := backend.New(ctx, backend.Config{
		Store: st, Fleet: fleet, Logger: slog.New(slog.DiscardHandler),
		ValidateModule: func(_ context.Context, wasm []byte) (abi.Meta, error) {
			if !bytes.HasPrefix(wasm, []byte("\x00asm")) {
				return abi.Meta{}, errors.New("not wasm")
			}
			return abi.Meta{Name: "game", TickRate: 30, MaxPlayers: 4, FrameDivisor: 1, ViewFormat: "indexed8", ViewWidth: 64, ViewHeight: 64}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := srv.EnsureTenant(ctx, "demo", "Demo")
	if err != nil {
		t.Fatal(err)
	}
	build := func(i int) []byte { return fmt.Appendf([]byte("\x00asm\x01\x00\x00\x00"), "save %d", i) }
	other, err := srv.EnsureModule(ctx, tenant, "other", build(-1))
	if err != nil {
		t.Fatal(err)
	}
	upload := devUpload(srv, tenant, devKeepBuilds, slog.New(slog.DiscardHandler))
	var live string
	for i := range store.MaxModuleBuildsPerTenant + 20 {
		id, err := upload(ctx, "game", build(i))
		if err != nil {
			t.Fatalf("save %d: %v", i, err)
		}
		if i == 10 { // a game starts on this build and keeps running
			live = id
			fleet.mu.Lock()
			fleet.games = []*ludusv1.GameInfo{{GameId: "g1", BuildId: id, State: "running"}}
			fleet.mu.Unlock()
		}
	}
	ms, err := st.ListModules(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	var game []string
	hasOther, hasLive := false, false
	for _, m := range ms {
		switch {
		case m.Name == "other":
			hasOther = m.BuildID == other
		case m.BuildID == live:
			hasLive = true
		default:
			game = append(game, m.BuildID)
		}
	}
	if len(game) != devKeepBuilds || !hasLive || !hasOther {
		t.Fatalf("stored: %d newest builds of game (want %d), the live game's build %v (want true), other module %v (want true)",
			len(game), devKeepBuilds, hasLive, hasOther)
	}
}
