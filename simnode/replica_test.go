package simnode

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	"ludus.dev/ludus/simnode/engine"
)

// TestSpectatorReplica: a node that does not own a game serves its spectators
// from the log, at most half a second behind the owner, and keeps streaming
// through a handoff of the game between two other nodes.
func TestSpectatorReplica(t *testing.T) {
	a, ca := startNode(t, "n-rep-a")
	_, _ = startNode(t, "n-rep-b")
	_, cr := startNode(t, "n-rep-r")
	tenant := "tenant-r"
	id := createGame(t, ca, tenant, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The owner's own spectator stream tells us where the game is now.
	var ownerTick atomic.Int64
	go func() {
		for _, c := range []clusterv1connect.NodeServiceClient{ca} {
			s, err := c.StreamFrames(ctx, connect.NewRequest(&clusterv1.StreamFramesRequest{TenantId: tenant, GameId: id, Spectator: true}))
			if err != nil {
				return
			}
			for s.Receive() {
				if f := s.Msg().GetFrame(); f != nil {
					ownerTick.Store(f.Tick)
				}
			}
		}
	}()
	rs, err := cr.StreamFrames(ctx, connect.NewRequest(&clusterv1.StreamFramesRequest{TenantId: tenant, GameId: id, Spectator: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	frames, worst := 0, int64(0)
	handedOff := false
	for rs.Receive() {
		m := rs.Msg()
		if st := m.GetStatus(); st != nil {
			if st.NodeId != "n-rep-r" {
				t.Fatalf("spectators served by %s, not the replica node", st.NodeId)
			}
			if st.State != "running" {
				t.Fatalf("replica stream ended: %+v", st)
			}
			continue
		}
		f := m.GetFrame()
		frames++
		if ot := ownerTick.Load(); ot > 0 && frames > 20 && !handedOff {
			if lag := ot - f.Tick; lag > worst {
				worst = lag
			}
		}
		if frames == 40 {
			if _, err := a.Handoff(ctx, tenant, id, "n-rep-b"); err != nil {
				t.Fatal(err)
			}
			handedOff = true
		}
		if frames == 80 {
			break
		}
	}
	if frames < 80 {
		t.Fatalf("replica stream stopped after %d frames: %v", frames, rs.Err())
	}
	t.Logf("replica lag behind the owner: at most %d ticks (%.0f ms)", worst, float64(worst)*1000/35)
	if worst > 35/2+4 { // 0.5 s at 35 ticks/s, plus one frame of measurement slack
		t.Fatalf("replica lags %d ticks behind the owner, more than 0.5 s", worst)
	}
}

// TestSpectateGivenUpKeepsTheReplica: a spectator that gives up while the
// replica starts leaves it to the next one (its retry) instead of a replica
// nobody holds, which ran until its linger while the retry started another.
func TestSpectateGivenUpKeepsTheReplica(t *testing.T) {
	_, ca := startNode(t, "n-rg-a")
	r, _ := startNode(t, "n-rg-r")
	tenant := "tenant-rg"
	id := createGame(t, ca, tenant, 2)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.spectate(gone, tenant, id); err == nil {
		t.Fatal("a spectate whose context had ended succeeded")
	}
	r.replicasMu.Lock()
	first := r.replicas[gameKey(tenant, id)]
	r.replicasMu.Unlock()
	if first == nil {
		t.Fatal("the replica the spectator gave up on is not kept")
	}
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	again, err := r.spectate(ctx, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatal("the retry started a second replica")
	}
}

// TestReplicaErrorCodes: a spectator replica that cannot start says why
// with the code that tells the gateway what to do: only etcd's trouble is
// Unavailable ("retry"); a game that is gone, a module that fails and a
// caller that gave up are not.
func TestReplicaErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code connect.Code
	}{
		{fmt.Errorf("read log: %w", clusterstate.ErrGameNotFound), connect.CodeNotFound},
		{nodeErrorf(errModuleUnusable, "the module does not compile"), connect.CodeFailedPrecondition},
		{&engine.TrapError{Export: "ludus_init", Err: errors.New("unreachable")}, connect.CodeFailedPrecondition},
		{context.Canceled, connect.CodeCanceled},
		{errors.New("etcdserver: request timed out"), connect.CodeUnavailable},
	} {
		if got := connect.CodeOf(connectError(replicaError("g1", tc.err))); got != tc.code {
			t.Errorf("%v: %v, want %v", tc.err, got, tc.code)
		}
	}
}
