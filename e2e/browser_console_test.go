package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/games/builtin"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/devstack"
)

// TestBrowserConsole drives the studio console (/console, web/e2e/console.mjs)
// in headless Chromium: sign in with a studio's admin key, a bad upload refused
// in words, a good module uploaded and listed, an API key created and revoked,
// sign out and in with the operator key too, a player's live game listed,
// spectated and handed off, its node drained while the player keeps receiving
// frames, then ended (the player is told), webhooks, result rules, leaderboards, tenants, and every section at
// 360 px without sideways scrolling. Screenshots: artifacts/console-*.png.
//
// It runs on a dev stack of its own: draining takes a node out of the fleet for
// good, and the shared stack keeps its nodes for the other tests. The studio is
// a tenant created with the operator key, as `ludus ctl tenant create` does
// (the dev stack hands out no admin key of its demo tenant).
func TestBrowserConsole(t *testing.T) {
	chromium, artifacts := browserSetup(t)
	dir := t.TempDir()
	_ = os.Symlink(sharedCache(), filepath.Join(dir, "wazero-cache"))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := devstack.Start(ctx, devstack.Config{
		HTTPAddr: "127.0.0.1:0", DataDir: dir, Nodes: 3, NoFsync: true, LeaseTTL: 5 * time.Second,
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		s.Close(sctx)
	})

	admin := ludusv1connect.NewAdminServiceClient(http.DefaultClient, s.GatewayURL, connect.WithInterceptors(withTicket(&s.OperatorKey)))
	created, err := admin.CreateTenant(ctx, connect.NewRequest(&ludusv1.CreateTenantRequest{Slug: "studio", Name: "Console Studio"}))
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "arena.wasm")
	bad := filepath.Join(dir, "broken.wasm")
	if err := os.WriteFile(good, builtin.Arena, 0o644); err != nil {
		t.Fatal(err)
	}
	// Starts like a module (the wasm magic and version), then is not one.
	if err := os.WriteFile(bad, append([]byte("\x00asm\x01\x00\x00\x00"), []byte("this is not a module")...), 0o644); err != nil {
		t.Fatal(err)
	}

	script, _ := filepath.Abs("../web/e2e/console.mjs")
	cmd := exec.CommandContext(ctx, "node", script, s.GatewayURL+"/", artifacts)
	// Keys go in the environment, not the arguments (which every user of the
	// machine can read).
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium,
		"LUDUS_TENANT=studio", "LUDUS_KEY="+created.Msg.AdminKey, "LUDUS_OPERATOR_KEY="+s.OperatorKey,
		"GOOD_WASM="+good, "BAD_WASM="+bad)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("console e2e failed: %v", err)
	}
	for _, name := range []string{"console-upload-error.png", "console-modules.png", "console-games.png", "console-nodes.png", "console-phone.png"} {
		if st, err := os.Stat(filepath.Join(artifacts, name)); err != nil || st.Size() == 0 {
			t.Errorf("no screenshot %s", name)
		}
	}
}

// TestBrowserAccount drives the player site's account pages
// (web/e2e/account.mjs) in headless Chromium on the shared stack's demo
// tenant: a guest keeps the account with an email and password, signs out,
// is refused a wrong password in words, signs in with the email and sees the
// same account (also after a reload); leaderboards render; Back and Forward
// move between the pages; nothing scrolls sideways at 360 px. Screenshots:
// artifacts/account-*.png.
func TestBrowserAccount(t *testing.T) {
	chromium, artifacts := browserSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script, _ := filepath.Abs("../web/e2e/account.mjs")
	cmd := exec.CommandContext(ctx, "node", script, stack.GatewayURL+"/", artifacts)
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("account e2e failed: %v", err)
	}
	for _, name := range []string{"account-profile.png", "account-leaderboards.png", "account-phone.png"} {
		if st, err := os.Stat(filepath.Join(artifacts, name)); err != nil || st.Size() == 0 {
			t.Errorf("no screenshot %s", name)
		}
	}
}

// TestBrowserConsoleStudio drives the console's matchmaking, usage, batch and
// game-log sections (web/e2e/console-studio.mjs) in headless Chromium on the
// shared stack, as a studio of its own (a tenant created with the operator
// key, the arena uploaded): matchmaking rules refused in words, then set, read
// back and deleted; the logs of a running arena game (which prints nothing)
// say "No output yet"; quotas set with the operator key and the usage chart;
// a 3-game batch run followed to its end with its archive link. Screenshots:
// artifacts/console-{matchmaking,logs,usage,batch}.png.
func TestBrowserConsoleStudio(t *testing.T) {
	chromium, artifacts := browserSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := ludusv1connect.NewAdminServiceClient(http.DefaultClient, stack.GatewayURL, connect.WithInterceptors(withTicket(&stack.OperatorKey)))
	slug := fmt.Sprintf("studio-%d", time.Now().UnixNano()%1_000_000_000)
	created, err := admin.CreateTenant(ctx, connect.NewRequest(&ludusv1.CreateTenantRequest{Slug: slug, Name: "Console Studio"}))
	if err != nil {
		t.Fatal(err)
	}
	key := created.Msg.AdminKey
	studio := ludusv1connect.NewAdminServiceClient(http.DefaultClient, stack.GatewayURL, connect.WithInterceptors(withTicket(&key)))
	if _, err := studio.UploadModule(ctx, connect.NewRequest(&ludusv1.UploadModuleRequest{Name: "arena", Wasm: builtin.Arena})); err != nil {
		t.Fatal(err)
	}

	script, _ := filepath.Abs("../web/e2e/console-studio.mjs")
	cmd := exec.CommandContext(ctx, "node", script, stack.GatewayURL+"/", artifacts)
	// Keys go in the environment, not the arguments.
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium,
		"LUDUS_TENANT="+slug, "LUDUS_KEY="+key, "LUDUS_OPERATOR_KEY="+stack.OperatorKey)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("console studio e2e failed: %v", err)
	}
	for _, name := range []string{"console-matchmaking.png", "console-logs.png", "console-usage.png", "console-batch.png"} {
		if st, err := os.Stat(filepath.Join(artifacts, name)); err != nil || st.Size() == 0 {
			t.Errorf("no screenshot %s", name)
		}
	}
}
