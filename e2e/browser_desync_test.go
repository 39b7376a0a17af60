package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ops/devstack"
)

// TestBrowserDesyncShowsTheReason is TestHandoffDesyncFailsLoudly seen from a
// player's page in Chromium (web/e2e/desync.mjs): the page plays the desyncing
// game as its second player, and after the handoff it says the game stopped
// because of an error on the server, with the server's reason (the desync and
// its likely causes) under the status bar's details.
func TestBrowserDesyncShowsTheReason(t *testing.T) {
	chromium, artifacts := browserSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := ludusBinary(t)
	uploadTalker(t, ctx)
	pl := login(t, protocols()[0], devstack.DemoTenant)
	g, stream := pl.play(t, ctx, &ludusv1.CreateGameRequest{ModuleName: "talker", Config: []byte(`{"view":true}`)}, 5)
	go func() { // keep reading: the stream must not back up while the page plays
		for stream.Receive() {
		}
	}()

	s := startBrowserScript(t, ctx, chromium, "desync.mjs", nil, stack.GatewayURL+"/", artifacts)
	defer s.cmd.Process.Kill()
	if _, err := fmt.Fprintf(s.stdin, "GAME %s\n", g.GameId); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(s.stdout)
	var printed []string
	var result struct {
		OK      bool   `json:"ok"`
		Message string `json:"message"`
		Reason  string `json:"reason"`
	}
	for lines.Scan() {
		line := lines.Text()
		printed = append(printed, line)
		switch {
		case line == "JOINED":
			time.Sleep(300 * time.Millisecond) // past a state hash and a log flush with two players
			if out, err := ctlHandoff(ctx, bin, g.GameId); err == nil || !strings.Contains(string(out), "desync in game "+g.GameId) {
				t.Errorf("ctl game handoff: err %v, printed:\n%s", err, out)
			}
		case strings.HasPrefix(line, "{"):
			if err := json.Unmarshal([]byte(line), &result); err != nil {
				t.Fatalf("the script's result %q: %v", line, err)
			}
		}
	}
	if err := s.cmd.Wait(); err != nil || !result.OK {
		t.Fatalf("desync.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, strings.Join(printed, "\n"), s.stderr.String())
	}
	for _, want := range []string{"desync in game " + g.GameId, "likely causes"} {
		if !strings.Contains(result.Reason, want) {
			t.Fatalf("the page's stop reason %q has no %q", result.Reason, want)
		}
	}
	t.Logf("page: %s / details: %s", result.Message, result.Reason)
}
