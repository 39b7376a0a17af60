package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestBrowserFindMatch drives the lobby's "Find match" (web/e2e/findmatch.mjs,
// one flow per subtest) in headless Chromium on the shared stack, whose demo
// tenant has the arena rules `ludus dev` seeds (two teams of two): four
// players searching land in the same game; a party of two made through an
// invite link lands on one team; a cancelled search says so and lets the tab
// search again. Each player is a browser context of its own. Screenshot:
// artifacts/find-match.png.
func TestBrowserFindMatch(t *testing.T) {
	chromium, artifacts := browserSetup(t)
	script, _ := filepath.Abs("../web/e2e/findmatch.mjs")
	for _, flow := range []string{"four", "party", "cancel"} {
		t.Run(flow, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", script, stack.GatewayURL+"/", artifacts, flow)
			cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
			out, err := cmd.CombinedOutput()
			t.Logf("%s", out)
			if err != nil {
				t.Fatalf("find-match e2e %s failed: %v", flow, err)
			}
		})
	}
	if st, err := os.Stat(filepath.Join(artifacts, "find-match.png")); err != nil || st.Size() == 0 {
		t.Errorf("no screenshot find-match.png")
	}
}
