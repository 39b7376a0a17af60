package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestBrowserPlays drives the real web client in headless Chromium (Debian's
// chromium with playwright-core): open the page, click Play, press a key, see
// the canvas change, open the spectator view. The screenshot is kept in
// artifacts/ at the repository root.
func TestBrowserPlays(t *testing.T) {
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	script, _ := filepath.Abs("../web/e2e/play.mjs")
	missing := ""
	if _, err := os.Stat(chromium); err != nil {
		missing = "chromium (apt-get install chromium)"
	} else if _, err := os.Stat("../web/node_modules/playwright-core"); err != nil {
		missing = "playwright-core (cd web && npm ci)"
	} else if _, err := exec.LookPath("node"); err != nil {
		missing = "node"
	}
	if missing != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("browser test needs %s; .ci/run installs it", missing)
		}
		t.Skipf("browser test needs %s", missing)
	}
	artifacts, _ := filepath.Abs("../artifacts")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(artifacts, "browser-play.png")
	for _, proto := range []string{"", "grpcweb"} {
		url := stack.GatewayURL + "/"
		name := "connect"
		if proto != "" {
			url += "?protocol=" + proto
			name = proto
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			out := shot
			if proto != "" {
				out = filepath.Join(artifacts, "browser-play-"+proto+".png")
			}
			cmd := exec.CommandContext(ctx, "node", script, url, out)
			cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
			res, err := cmd.CombinedOutput()
			t.Logf("%s", res)
			if err != nil {
				t.Fatalf("browser e2e failed: %v", err)
			}
			if st, err := os.Stat(out); err != nil || st.Size() == 0 {
				t.Fatalf("no screenshot at %s", out)
			}
			t.Logf("screenshot: %s", out)
		})
	}
}
