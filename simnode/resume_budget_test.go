package simnode

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

type densityModules struct{}

func (densityModules) FetchModule(context.Context, string, string) ([]byte, error) {
	return builtin.DensityGo, nil
}

// TestResumeOutOfTimeReleasesTheGame guards what a resume does when its
// budget runs out: the replay stops (it checks its context) and the node
// releases its claim, so the game is tried again, and is not failed (nothing
// says it cannot be rebuilt). adopt used to return with the claim held: the
// game stayed owned by a node that did not run it, for as long as that node
// lived. The budget is shortened here to stand for a log that takes longer
// than the real one (resumeBudget).
func TestResumeOutOfTimeReleasesTheGame(t *testing.T) {
	ctx := context.Background()
	const tenant, id = "tenant-slow", "slow-resume"
	const ticks = 1 << 30 // far more than any replay gets through in the budget
	spec := clusterstate.GameSpec{TenantID: tenant, GameID: id, BuildID: engine.BuildID(builtin.DensityGo), Seed: 7, TickRate: 30,
		MaxPlayers: 1, FrameDivisor: 30, ViewFormat: "density-v1"}
	sb, _ := json.Marshal(spec)
	st, _ := json.Marshal(clusterstate.GameStatus{State: clusterstate.StateRunning, Tick: ticks})
	chunk := inputlog.Encode(nil, &inputlog.Chunk{From: 0, To: ticks})
	t.Cleanup(func() {
		for _, k := range []string{clusterstate.GameKey(tenant, id), clusterstate.StatusKey(tenant, id), clusterstate.OwnerKey(tenant, id),
			clusterstate.CheckpointKey(tenant, id)} {
			etcdCli.Delete(context.Background(), k)
		}
		etcdCli.Delete(context.Background(), clusterstate.LogPrefix(tenant, id), clientv3.WithPrefix())
	})
	for k, v := range map[string]string{clusterstate.GameKey(tenant, id): string(sb), clusterstate.StatusKey(tenant, id): string(st),
		clusterstate.LogKey(tenant, id, 1): string(chunk)} {
		if _, err := etcdCli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := etcdCli.Watch(wctx, clusterstate.OwnerKey(tenant, id))

	n, err := New(Config{ID: "n-slow", Addr: "http://127.0.0.1:1", Etcd: state, Engine: testEng, Modules: densityModules{}, LeaseTTL: 2 * time.Second,
		IdleEnd: -1, ClusterToken: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	n.resumeBudget = func(int64, int) time.Duration { return time.Second }
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })

	claimed := false
	timeout := time.After(20 * time.Second)
	for {
		select {
		case wr := <-wch:
			for _, ev := range wr.Events {
				switch {
				case ev.Type == clientv3.EventTypePut:
					claimed = true
				case claimed:
					// Released (not failed: the status is still running).
					l, err := state.ReadLog(ctx, tenant, id)
					if err != nil {
						t.Fatal(err)
					}
					if l.Status.State != clusterstate.StateRunning {
						t.Fatalf("a resume out of time left the game %q: %s", l.Status.State, l.Status.Message)
					}
					return
				}
			}
		case <-timeout:
			if !claimed {
				t.Fatal("the node never claimed the game")
			}
			t.Fatal("STRANDED: the node claimed the game, ran out of time resuming it and never released it")
		}
	}
}

// TestResumeBudgetGrowsWithTheLog guards the resume budget's second term: a
// game that ran for an hour may take up to an hour more than resumeBase to
// replay, so a long log is not timed out on every node forever.
func TestResumeBudgetGrowsWithTheLog(t *testing.T) {
	if got, want := defaultResumeBudget(30*3600, 30), resumeBase+time.Hour; got != want {
		t.Fatalf("budget for an hour at 30 Hz: %v, want %v", got, want)
	}
	if got := defaultResumeBudget(0, 30); got != resumeBase {
		t.Fatalf("budget for an empty log: %v, want %v", got, resumeBase)
	}
}
