package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/simnode/engine"
)

// TestEtcdClusterFaults runs the fleet on a 3-member etcd cluster. Killing one
// member mid-play interrupts no game; stopping every member makes every sim
// node stop simulating within its lease TTL; when etcd returns, every game
// resumes from its log.
func TestEtcdClusterFaults(t *testing.T) {
	c := startCluster(t, 2, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	auth := ludusv1connect.NewAuthServiceClient(http.DefaultClient, c.GatewayURL)
	l, err := auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "demo", DeviceId: "etcd-faults-device-01"}))
	if err != nil {
		t.Fatal(err)
	}
	ticket := l.Msg.Ticket
	games := ludusv1connect.NewGameServiceClient(http.DefaultClient, c.GatewayURL, connect.WithInterceptors(withTicket(&ticket)))
	owners := map[string]string{}
	for i := 0; i < 4; i++ {
		g, err := games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 3}))
		if err != nil {
			t.Fatal(err)
		}
		owners[g.Msg.Game.GameId] = g.Msg.Game.NodeId
	}
	view := c.Etcd.View()
	ownersNow := func() map[string]string {
		out := map[string]string{}
		for id := range owners {
			g, err := view.Game(ctx, c.TenantID, id)
			if err == nil {
				out[id] = g.Owner
			}
		}
		return out
	}

	// 1. Kill one member (a follower: losing the leader costs an election, which
	// with etcd's default 1 s election timeout can outlast 2/3 of a 2 s lease).
	victim := ""
	for i, ep := range c.EtcdEndpoints {
		st, err := c.Etcd.Raw().Status(ctx, ep)
		if err == nil && st.Leader != st.Header.MemberId {
			victim = []string{"etcd-0", "etcd-1", "etcd-2"}[i]
			break
		}
	}
	if victim == "" {
		t.Fatal("no follower found")
	}
	if err := c.Proc(victim).Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	for id, o := range ownersNow() {
		if o != owners[id] {
			t.Fatalf("game %s moved from %s to %q after one etcd member died", id, owners[id], o)
		}
	}
	if err := c.Restart(victim); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)

	// 2. Stop every member: no node may keep simulating past its lease TTL.
	stopped := time.Now()
	for _, m := range []string{"etcd-0", "etcd-1", "etcd-2"} {
		if err := c.Proc(m).Kill(); err != nil {
			t.Fatal(err)
		}
	}
	nodeClient := func(id string) clusterv1connect.NodeServiceClient {
		cred, err := clustercred.GatewayToNode(c.ClusterToken, id)
		if err != nil {
			t.Fatal(err)
		}
		return clusterv1connect.NewNodeServiceClient(http.DefaultClient, c.NodeAddrs[id], connect.WithInterceptors(withTicket(&cred)))
	}
	for id, o := range owners {
		for {
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			_, err := nodeClient(o).GetGame(cctx, connect.NewRequest(&clusterv1.GetGameRequest{TenantId: c.TenantID, GameId: id}))
			ccancel()
			if connect.CodeOf(err) == connect.CodeNotFound {
				break
			}
			if time.Since(stopped) > 2*time.Second+500*time.Millisecond {
				t.Fatalf("node %s still simulates game %s %v after etcd stopped (lease TTL 2 s)", o, id, time.Since(stopped))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("every node stopped its games within %v of losing etcd", time.Since(stopped).Round(time.Millisecond))

	// 3. etcd returns: every game resumes from its log.
	for _, m := range []string{"etcd-0", "etcd-1", "etcd-2"} {
		if err := c.Restart(m); err != nil {
			t.Fatal(err)
		}
	}
	back := time.Now()
	for id := range owners {
		for {
			g, err := view.Game(ctx, c.TenantID, id)
			if err == nil && g.Owner != "" && g.Status.State == clusterstate.StateRunning {
				cctx, ccancel := context.WithTimeout(ctx, time.Second)
				_, err = nodeClient(g.Owner).GetGame(cctx, connect.NewRequest(&clusterv1.GetGameRequest{TenantId: c.TenantID, GameId: id}))
				ccancel()
				if err == nil {
					break
				}
			}
			if time.Since(back) > time.Minute {
				t.Fatalf("game %s did not resume after etcd returned: %+v %v", id, g, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("all games running again %v after etcd returned", time.Since(back).Round(time.Millisecond))

	// 4. Each game moved at most once: no node resumed a game under a claim of
	// its lease from before the outage (that lease is no longer renewed, so the
	// claim would expire and the game move again). The claims must hold for
	// longer than a lease TTL.
	claims := map[string]string{}
	for id := range owners {
		resp, err := c.Etcd.Raw().Get(ctx, clusterstate.OwnerKey(c.TenantID, id))
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatalf("game %s: no owner key after resuming: %v", id, err)
		}
		claims[id] = string(resp.Kvs[0].Value)
	}
	time.Sleep(2*2*time.Second + time.Second)
	for id, claim := range claims {
		resp, err := c.Etcd.Raw().Get(ctx, clusterstate.OwnerKey(c.TenantID, id))
		if err != nil || len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != claim {
			got := "none"
			if err == nil && len(resp.Kvs) > 0 {
				got = string(resp.Kvs[0].Value)
			}
			t.Fatalf("game %s moved again after resuming: claim %s became %s", id, claim, got)
		}
	}
	eng, err := engine.New(ctx, engine.Config{CacheDir: sharedCache()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	for id := range owners {
		if err := replayOK(ctx, c, eng, id); err != nil {
			t.Fatalf("game %s: %v", id, err)
		}
	}
	_ = builtin.Arena
}
