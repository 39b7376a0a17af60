package gcpolicy

import (
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// unset removes key from the environment for the test (t.Setenv restores it).
func unset(t *testing.T, key string) {
	t.Setenv(key, "")
	os.Unsetenv(key)
}

func TestServerPolicy(t *testing.T) {
	t.Cleanup(Save())
	unset(t, "GOGC")
	unset(t, "GOMEMLIMIT")
	unset(t, "AUTOMEMLIMIT")
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	s := ForServer(quiet)
	if s.GCPercent != ServerGCPercent {
		t.Errorf("GC percent %d, want %d", s.GCPercent, ServerGCPercent)
	}
	// This machine has memory, so a limit below it is set.
	if s.MemoryLimit <= 0 || s.MemoryLimit == math.MaxInt64 {
		t.Errorf("memory limit %d, want a limit", s.MemoryLimit)
	}
	if got := Current(); got != s {
		t.Errorf("Current() = %+v, want %+v", got, s)
	}
}

func TestEnvironmentWins(t *testing.T) {
	t.Cleanup(Save())
	t.Setenv("GOGC", "150")
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetGCPercent(150)       // as the runtime did when GOGC was read
	debug.SetMemoryLimit(1 << 30) // likewise GOMEMLIMIT
	s := ForServer(quiet)
	if s.GCPercent != 150 || s.MemoryLimit != 1<<30 {
		t.Errorf("with GOGC=150 GOMEMLIMIT=1GiB: %+v, want them kept", s)
	}
}

func TestAutomemlimitOff(t *testing.T) {
	t.Cleanup(Save())
	unset(t, "GOGC")
	unset(t, "GOMEMLIMIT")
	t.Setenv("AUTOMEMLIMIT", "off")
	debug.SetMemoryLimit(math.MaxInt64)
	if s := ForServer(quiet); s.MemoryLimit != 0 || s.GCPercent != ServerGCPercent {
		t.Errorf("with AUTOMEMLIMIT=off: %+v, want GC percent %d and no limit", s, ServerGCPercent)
	}
}
