package main

import (
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"testing"

	"ludus.dev/ludus/internal/gcpolicy"
)

// TestServerGC: etcd and the gateways (matchmaker replicas) run with the
// servers' GC policy; backends, sim nodes and the tools keep Go's defaults
// (docs/OPERATIONS.md).
func TestServerGC(t *testing.T) {
	t.Cleanup(gcpolicy.Save())
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for command, want := range map[string]bool{"dev": true, "gateway": true, "etcd": true,
		"backend": false, "simnode": false, "ctl": false, "bench": false, "new": false} {
		debug.SetGCPercent(100)
		applied := serverGC(command, quiet)
		got := gcpolicy.Current().GCPercent == gcpolicy.ServerGCPercent
		if applied != want || got != want {
			t.Errorf("ludus %s: policy applied %v (GC percent %d), want %v", command, applied, gcpolicy.Current().GCPercent, want)
		}
	}
}
