package simnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"ludus.dev/ludus/clusterstate"
)

// TestFinishedReplicaLeavesTheNode guards the node's replica table: a
// replica whose game ended (here by idling out) must leave n.replicas when
// it stops. Only the path that stops a replica without spectators removed
// it, so every replica that saw its game end stayed, with its last frames,
// for as long as the node ran.
func TestFinishedReplicaLeavesTheNode(t *testing.T) {
	owner := startReplicaTestNode(t, "n-leak-owner", 2*time.Second) // ends the game soon: nobody joins
	spectator := startReplicaTestNode(t, "n-leak-spectator", time.Minute)
	tenant, id := "tenant-leak", fmt.Sprintf("leak-%d", time.Now().UnixNano()) // fresh under -count
	rep := spectateNewArena(t, owner, spectator, tenant, id)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-rep.done:
	case <-ctx.Done():
		t.Fatal("the replica did not end with its game")
	}
	if st := rep.status.load().v; st.State != clusterstate.StateEnded {
		t.Logf("replica ended as %+v", st)
	}
	spectator.replicasMu.Lock()
	left := len(spectator.replicas)
	spectator.replicasMu.Unlock()
	if left != 0 {
		t.Fatalf("%d finished replica(s) still in the node's table", left)
	}
}
