package devstack

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// TestFailedStartReturnsItsError: a start that fails (here: its player
// port is taken) returns the error and stops what it started. Its clean-up
// used to close the nil stack the failing return had set, and panicked,
// hiding the error (a CI run's e2e test died of it, not of its cause).
func TestFailedStartReturnsItsError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{HTTPAddr: busy.Addr().String(), DataDir: t.TempDir(), Nodes: 1, NoFsync: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		s.Close(context.Background())
		t.Fatal("Start on a taken port succeeded")
	}
	if s != nil {
		t.Fatalf("a failed Start returned a stack: %v", s)
	}
}
