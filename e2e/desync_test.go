package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ops/devstack"
)

// TestHandoffDesyncFailsLoudly is issue 15's walk-through of a real desync on
// the dev stack: a module whose View changes its state plays fine on its first
// node, but the node a handoff moves it to replays its log without calling
// View and finds other state hashes. `ludus ctl game handoff` (the real
// binary) exits non-zero naming the desync and its likely cause instead of
// printing "moved", and the player's stream ends with the game failed and the
// reason, instead of staying on "migrating".
func TestHandoffDesyncFailsLoudly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go wasm module and the ludus binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := ludusBinary(t)
	uploadTalker(t, ctx)
	pl := login(t, protocols()[0], devstack.DemoTenant)
	// Every frame drawn for the player is a View call that changes the state.
	g, stream := pl.play(t, ctx, &ludusv1.CreateGameRequest{ModuleName: "talker", Config: []byte(`{"view":true}`)}, 20)
	id := g.GameId
	time.Sleep(300 * time.Millisecond) // past a state hash and a log flush

	out, err := ctlHandoff(ctx, bin, id)
	if err == nil || strings.Contains(string(out), "moved to") && !strings.Contains(string(out), "then failed") {
		t.Fatalf("ctl game handoff of a desyncing game: err %v, printed:\n%s", err, out)
	}
	for _, want := range []string{"desync in game " + id, "a View or state hash that changes state"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("ctl game handoff printed no %q:\n%s", want, out)
		}
	}

	// The player's stream ends, with the reason, within the gateway's bound
	// on migrating; it never sits on "migrating".
	var last *ludusv1.Status
	for stream.Receive() {
		if st := stream.Msg().GetStatus(); st != nil {
			last = st
		}
	}
	if last == nil || last.State != "failed" || !strings.Contains(last.Message, "desync in game") {
		t.Fatalf("the player's stream ended with %+v (err %v)", last, stream.Err())
	}
	t.Logf("ctl: %s; player: %s", strings.TrimSpace(string(out)), last.Message)
}

// uploadTalker builds the talker test module (its View changes its state when
// its config says {"view":true}) and uploads it to the demo tenant.
func uploadTalker(t *testing.T, ctx context.Context) {
	t.Helper()
	wasm := filepath.Join(t.TempDir(), "talker.wasm")
	build := exec.CommandContext(ctx, "go", "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-o", wasm, "../simnode/engine/testdata/talker")
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the talker module: %v\n%s", err, out)
	}
	code, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Backend.EnsureModule(ctx, stack.TenantID, "talker", code); err != nil {
		t.Fatalf("upload: %v", err)
	}
}

// ctlHandoff runs the real `ludus ctl game handoff` of a demo game and returns
// what it printed.
func ctlHandoff(ctx context.Context, bin, game string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, "ctl", "--url", stack.GatewayURL, "game", "handoff", devstack.DemoTenant, game)
	cmd.Env = append(os.Environ(), "LUDUS_KEY="+stack.OperatorKey, "LUDUS_KEY_FILE=")
	return cmd.CombinedOutput()
}
