package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// A mistyped flag (or -h) prints the role's usage text, which shows each
// flag's default; the defaults of secret flags come from the environment
// and must not appear in it, only the variable they come from.
func TestUsageHidesSecrets(t *testing.T) {
	for name, env := range secretFlags {
		t.Setenv(env, "s3cret-"+name+"-value")
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for role, run := range map[string]func(context.Context, []string, *slog.Logger) error{
		"backend": runBackend, "gateway": runGateway, "simnode": runSimnode,
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr := os.Stderr
		os.Stderr = w
		runErr := run(context.Background(), []string{"--no-such-flag"}, quiet)
		os.Stderr = stderr
		w.Close()
		out, _ := io.ReadAll(r)
		r.Close()
		if runErr == nil {
			t.Fatalf("%s accepted an unknown flag", role)
		}
		if strings.Contains(string(out), "s3cret-") {
			t.Errorf("%s's usage text shows a secret:\n%s", role, out)
		}
		if !strings.Contains(string(out), "$LUDUS_CLUSTER_TOKEN, not shown") {
			t.Errorf("%s's usage text does not say where the cluster token comes from:\n%s", role, out)
		}
	}
}
