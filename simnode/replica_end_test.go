package simnode

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/simnode/inputlog"
)

// startReplicaTestNode starts a node for the replica tests.
func startReplicaTestNode(t *testing.T, id string, idle time.Duration) *Node {
	t.Helper()
	n, err := New(Config{ID: id, Addr: "http://127.0.0.1:1", Etcd: state, Engine: testEng, Modules: staticModules{}, LeaseTTL: 3 * time.Second,
		IdleEnd: idle, ClusterToken: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// spectateNewArena starts an arena game of 2 bots on owner and a replica of
// it on spectator with one spectator watching, so that only the game's end
// ends the replica (not replicaLinger).
func spectateNewArena(t *testing.T, owner, spectator *Node, tenant, id string) *replica {
	t.Helper()
	if _, err := owner.StartGame(context.Background(), clusterstate.GameSpec{TenantID: tenant, GameID: id, BuildID: arenaID, Seed: 5,
		Config: []byte(`{"bots":2}`)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := spectator.spectate(ctx, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	rep.viewerJoined()
	return rep
}

// awaitReplicaEnd waits for a spectated replica to end and returns its last
// status.
func awaitReplicaEnd(t *testing.T, n *Node, rep *replica, d time.Duration) Status {
	t.Helper()
	select {
	case <-rep.done:
	case <-time.After(d):
		t.Fatalf("the replica is still running after %v: %+v", d, rep.status.load().v)
	}
	n.replicasMu.Lock()
	left := len(n.replicas)
	n.replicasMu.Unlock()
	if left != 0 {
		t.Fatalf("%d finished replica(s) still in the node's table", left)
	}
	return rep.status.load().v
}

// TestReplicaEndsWithAFailedGame: a game its owner fails (here an operator's
// EndGame) writes a failed status and no ended chunk. The replica followed
// the log alone and went on waiting for chunks: its spectators watched a
// frozen game for as long as they stayed. It now ends with the game's own
// state and reason.
func TestReplicaEndsWithAFailedGame(t *testing.T) {
	owner := startReplicaTestNode(t, "n-repfail-owner", time.Minute)
	spectator := startReplicaTestNode(t, "n-repfail-spectator", time.Minute)
	tenant, id := "tenant-repfail", fmt.Sprintf("repfail-%d", time.Now().UnixNano()) // fresh under -count
	rep := spectateNewArena(t, owner, spectator, tenant, id)
	time.Sleep(500 * time.Millisecond)
	g, ok := owner.game(tenant, id)
	if !ok {
		t.Fatal("the game is not on its owner")
	}
	g.stop("ended by an operator: maintenance")
	<-g.done
	st := awaitReplicaEnd(t, spectator, rep, 10*time.Second)
	if st.State != clusterstate.StateFailed || !strings.Contains(st.Message, "maintenance") {
		t.Fatalf("the replica ended as %+v; want failed with the operator's reason", st)
	}
}

// TestReplicaEndsWhenTheModuleEndsBeforeTheLog: a module that ends its match
// before the log does (a desync: the recorded run went on) made the replica
// step an ended instance, whose tick no longer moves, for good. It now ends,
// failed, saying where the runs diverged.
func TestReplicaEndsWhenTheModuleEndsBeforeTheLog(t *testing.T) {
	ctx := context.Background()
	tenant, id := "tenant-repearly", fmt.Sprintf("repearly-%d", time.Now().UnixNano())
	spec := clusterstate.GameSpec{TenantID: tenant, GameID: id, BuildID: arenaID, Seed: 3, TickRate: 35, MaxPlayers: 8, FrameDivisor: 1,
		Config: []byte(`{"bots":2,"time_limit_s":1}`)} // the arena ends at tick 35
	sb, _ := json.Marshal(spec)
	st, _ := json.Marshal(clusterstate.GameStatus{State: clusterstate.StateRunning, Tick: 70})
	chunk := inputlog.Encode(nil, &inputlog.Chunk{From: 0, To: 70}) // the recorded run went on to tick 70
	lease, err := etcdCli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		etcdCli.Revoke(context.Background(), lease.ID)
		for _, k := range []string{clusterstate.GameKey(tenant, id), clusterstate.StatusKey(tenant, id), clusterstate.OwnerKey(tenant, id)} {
			etcdCli.Delete(context.Background(), k)
		}
		etcdCli.Delete(context.Background(), clusterstate.LogPrefix(tenant, id), clientv3.WithPrefix())
	})
	// An owner elsewhere, so that no node takes the game over.
	if _, err := etcdCli.Put(ctx, clusterstate.OwnerKey(tenant, id), "n-elsewhere", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{clusterstate.GameKey(tenant, id): string(sb), clusterstate.StatusKey(tenant, id): string(st),
		clusterstate.LogKey(tenant, id, 1): string(chunk)} {
		if _, err := etcdCli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	n := startReplicaTestNode(t, "n-repearly", time.Minute)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := n.spectate(sctx, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	rep.viewerJoined()
	got := awaitReplicaEnd(t, n, rep, 10*time.Second)
	if got.State != clusterstate.StateFailed || !strings.Contains(got.Message, "desync") || !strings.Contains(got.Message, "tick 70") {
		t.Fatalf("the replica ended as %+v; want failed by a desync naming the log's end", got)
	}
}
