package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// keyRecorder is an AdminService that records the key each ListModules
// call presents.
type keyRecorder struct {
	ludusv1connect.UnimplementedAdminServiceHandler
	mu   sync.Mutex
	keys []string
}

func (k *keyRecorder) ListModules(_ context.Context, req *connect.Request[ludusv1.ListModulesRequest]) (*connect.Response[ludusv1.ListModulesResponse], error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = append(k.keys, strings.TrimPrefix(req.Header().Get("Authorization"), "Bearer "))
	return connect.NewResponse(&ludusv1.ListModulesResponse{}), nil
}

func (k *keyRecorder) last() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.keys) == 0 {
		return ""
	}
	return k.keys[len(k.keys)-1]
}

// TestCtlKeyOutOfArgv: ludus ctl takes its key from --key-file or
// $LUDUS_KEY (so it never shows in ps); --key still works.
func TestCtlKeyOutOfArgv(t *testing.T) {
	rec := &keyRecorder{}
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewAdminServiceHandler(rec))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "operator.key")
	if err := os.WriteFile(file, []byte("lds_from_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(args ...string) error {
		var out bytes.Buffer
		return runCtl(ctx, append([]string{"--url", srv.URL}, args...), &out)
	}
	t.Setenv("LUDUS_KEY", "")
	t.Setenv("LUDUS_KEY_FILE", "")
	if err := run("--key-file", file, "modules"); err != nil || rec.last() != "lds_from_file" {
		t.Fatalf("--key-file: sent %q, %v", rec.last(), err)
	}
	t.Setenv("LUDUS_KEY", "lds_from_env")
	if err := run("modules"); err != nil || rec.last() != "lds_from_env" {
		t.Fatalf("$LUDUS_KEY: sent %q, %v", rec.last(), err)
	}
	t.Setenv("LUDUS_KEY_FILE", file)
	if err := run("modules"); err != nil || rec.last() != "lds_from_file" {
		t.Fatalf("$LUDUS_KEY_FILE: sent %q, %v", rec.last(), err)
	}
	if err := run("--key", "lds_from_argv", "modules"); err != nil || rec.last() != "lds_from_argv" {
		t.Fatalf("--key: sent %q, %v", rec.last(), err)
	}
	if err := run("--key", "x", "--key-file", file, "modules"); err == nil {
		t.Error("--key with --key-file accepted")
	}
	if err := run("--key-file", filepath.Join(dir, "missing"), "modules"); err == nil {
		t.Error("a missing key file accepted")
	}
	two := filepath.Join(dir, "two.key")
	os.WriteFile(two, []byte("lds_a\nlds_b\n"), 0o600)
	if err := run("--key-file", two, "modules"); err == nil {
		t.Error("a key file of two lines accepted")
	}
	var out bytes.Buffer
	runCtl(ctx, []string{"help"}, &out)
	if !strings.Contains(out.String(), "--key-file") || !strings.Contains(out.String(), "discouraged") {
		t.Errorf("usage does not document --key-file:\n%s", out.String())
	}
}
