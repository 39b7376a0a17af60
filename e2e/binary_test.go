package e2e

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDevCommand runs the real binary: `ludus dev` comes up on a free loopback
// port, /healthz answers 200, Ctrl-C (SIGINT) stops everything within a few
// seconds, and a second start on the same data directory reuses the demo
// tenant and its arena module instead of creating them again.
func TestDevCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the ludus binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "ludus")
	build := exec.Command("go", "build", "-o", bin, "../cmd/ludus")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Symlink(sharedCache(), filepath.Join(data, "wazero-cache"))

	for run := 1; run <= 2; run++ {
		url, stop := startDev(t, bin, data)
		waitHealthy(t, url)
		key, err := os.ReadFile(filepath.Join(data, "operator.key"))
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "ctl", "--url", url, "--key", strings.TrimSpace(string(key)), "tenants").CombinedOutput()
		if err != nil {
			t.Fatalf("ctl tenants: %v\n%s", err, out)
		}
		if n := strings.Count(string(out), " demo "); n != 1 {
			t.Fatalf("run %d: want exactly one demo tenant, ctl says:\n%s", run, out)
		}
		stop()
	}
}

func startDev(t *testing.T, bin, data string) (url string, stop func()) {
	t.Helper()
	cmd := exec.Command(bin, "dev", "--http", "127.0.0.1:0", "--data", data)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if os.Getenv("LUDUS_E2E_LOG") == "" {
		cmd.Stderr = nil
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	urls := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`play:\s+(http://\S+)`)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		done <- cmd.Wait()
	}()
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("ludus dev exited before serving: %v", err)
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatal("ludus dev did not print its URL within 2 minutes")
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		start := time.Now()
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("ludus dev exited with %v after Ctrl-C", err)
			}
			t.Logf("ludus dev stopped %v after Ctrl-C", time.Since(start).Round(time.Millisecond))
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatal("ludus dev still running 10 s after Ctrl-C")
		}
	}
	t.Cleanup(stop)
	return url, stop
}

func waitHealthy(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s/healthz never answered 200 (last error %v)", url, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
