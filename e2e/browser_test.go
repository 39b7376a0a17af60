package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// TestBrowserPlays drives the real web client in headless Chromium (Debian's
// chromium with playwright-core): open the page, click Play, press a key, see
// the canvas change, open the spectator view. The screenshot is kept in
// artifacts/ at the repository root.
func TestBrowserPlays(t *testing.T) {
	chromium, artifacts := browserSetup(t)
	script, _ := filepath.Abs("../web/e2e/play.mjs")
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

// browserSetup returns the Chromium to use and the artifacts directory, or skips
// (fails in CI) when Chromium, node or playwright-core is missing.
// browserScript is a script of web/e2e the test talks to: lines to its
// stdin, lines from its stdout, and its stderr kept for the report.
type browserScript struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr bytes.Buffer
}

// startBrowserScript starts `node web/e2e/NAME ARGS...` with Chromium and
// env in its environment.
func startBrowserScript(t *testing.T, ctx context.Context, chromium, name string, env []string, args ...string) *browserScript {
	t.Helper()
	script, _ := filepath.Abs(filepath.Join("../web/e2e", name))
	s := &browserScript{cmd: exec.CommandContext(ctx, "node", append([]string{script}, args...)...)}
	s.cmd.Env = append(append(os.Environ(), "CHROMIUM="+chromium), env...)
	s.cmd.Stderr = &s.stderr
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if s.stdout, err = s.cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

func browserSetup(t *testing.T) (chromium, artifacts string) {
	t.Helper()
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
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
	artifacts, _ = filepath.Abs("../artifacts")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	return chromium, artifacts
}

// TestBrowserSite drives the player site's flows in headless Chromium
// (web/e2e/site.mjs, one flow per subtest): the page presented from the
// module's metadata, per-tab sessions and history navigation, the status bar
// (including a real handoff to another node), errors in words with bounded
// retries (none for a game that is over; a seat the game gave up taken
// again, a stale ticket renewed with Refresh, a quota and a stream limit in
// the server's words without automatic retries) and the 404 page, and a phone: touch controls, sharing, full screen
// and the games table at 360 px. Screenshots go to artifacts/web-*.png.
func TestBrowserSite(t *testing.T) {
	chromium, artifacts := browserSetup(t)
	for _, flow := range []string{"meta", "session", "status", "errors", "phone"} {
		t.Run(flow, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
			defer cancel()
			s := startBrowserScript(t, ctx, chromium, "site.mjs", nil, stack.GatewayURL+"/", artifacts, flow)
			stdin := s.stdin
			sc := bufio.NewScanner(s.stdout)
			var out []string
			for sc.Scan() {
				line := sc.Text()
				out = append(out, line)
				// The status flow asks for its game to be moved to another node.
				if id, ok := strings.CutPrefix(line, "GAME "); ok {
					fleetc := ludusv1connect.NewFleetServiceClient(http.DefaultClient, stack.GatewayURL, connect.WithInterceptors(withTicket(&stack.OperatorKey)))
					moved, err := fleetc.HandoffGame(ctx, connect.NewRequest(&ludusv1.HandoffGameRequest{TenantId: stack.TenantID, GameId: id}))
					if err != nil {
						fmt.Fprintf(stdin, "failed %v\n", err)
						t.Errorf("handoff of %s: %v", id, err)
						continue
					}
					t.Logf("moved %s from %s to %s", id, moved.Msg.FromNodeId, moved.Msg.ToNodeId)
					fmt.Fprintln(stdin, "moved")
				}
			}
			err := s.cmd.Wait()
			t.Logf("%s%s", strings.Join(out, "\n"), s.stderr.String())
			if err != nil {
				t.Fatalf("site e2e %s failed: %v", flow, err)
			}
		})
	}
}
