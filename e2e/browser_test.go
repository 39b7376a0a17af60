package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	// Both delivery modes over Connect (the module's own renderer in a Web
	// Worker, and frames rendered on the node), and the page's own choice
	// over gRPC-Web. play.mjs checks the status bar shows the forced mode,
	// that a key changes the picture and that Spectate draws; it reports the
	// browser's render time per frame.
	for _, c := range []struct{ proto, mode string }{{"", "snapshots"}, {"", "pixels"}, {"grpcweb", ""}} {
		url := stack.GatewayURL + "/"
		name := "connect"
		if c.proto != "" {
			url += "?protocol=" + c.proto
			name = c.proto
		}
		if c.mode != "" {
			name += "/" + c.mode
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			out := filepath.Join(artifacts, "browser-play.png")
			if c.proto != "" || c.mode != "" {
				out = filepath.Join(artifacts, "browser-play-"+strings.ReplaceAll(name, "/", "-")+".png")
			}
			args := []string{script, url, out}
			if c.mode != "" {
				args = append(args, c.mode)
			}
			cmd := exec.CommandContext(ctx, "node", args...)
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
