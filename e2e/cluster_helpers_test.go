package e2e

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/games/builtin"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/localcluster"
	"ludus.dev/ludus/simnode"
	"ludus.dev/ludus/simnode/engine"
)

func clientv3WithPrefix() []clientv3.OpOption { return []clientv3.OpOption{clientv3.WithPrefix()} }

// waitOwnerIs waits until the game runs on node (as JoinGame reports it).
func waitOwnerIs(t *testing.T, ctx context.Context, games ludusv1connect.GameServiceClient, id, node string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		j, err := games.JoinGame(cctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id}))
		cancel()
		if err == nil && j.Msg.Game.NodeId == node {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("game %s not running on %s: %v %v", id, node, j, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// replayOK replays a game's whole log, checking every recorded state hash.
func replayOK(ctx context.Context, c *localcluster.Cluster, eng *engine.Engine, id string) error {
	spec, chunks, err := c.ReadLog(ctx, id)
	if err != nil {
		return err
	}
	inst, _, err := simnode.Replay(ctx, eng, builtin.Arena, spec, chunks)
	if inst != nil {
		inst.Close(ctx)
	}
	return err
}

// failoverGames is the number of games of the kill -9 test (LUDUS_FAILOVER_GAMES
// overrides the 30 when debugging).
func failoverGames() int {
	if v, err := strconv.Atoi(os.Getenv("LUDUS_FAILOVER_GAMES")); err == nil && v > 0 {
		return v
	}
	return 30
}
