package e2e

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/devstack"
)

// TestTwoRegionsOnOneMachine: `ludus dev --regions eu,us` spreads its nodes
// over both regions with one gateway each; each gateway's Ping names its
// region, a game created through a gateway runs on a node of its region, and
// players who can reach only "us" are matched into a game on the us node,
// found through the us gateway.
func TestTwoRegionsOnOneMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := devstack.Start(ctx, devstack.Config{HTTPAddr: "127.0.0.1:0", DataDir: t.TempDir(), Nodes: 2, NoFsync: true,
		Regions: []string{"eu", "us"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	nodes, err := s.Etcd.View().Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	regionOf := map[string]string{}
	for _, n := range nodes {
		regionOf[n.ID] = n.Region
	}
	if len(nodes) != 2 || regionOf["node-1"] != "eu" || regionOf["node-2"] != "us" {
		t.Fatalf("node regions %v, want node-1 eu and node-2 us", regionOf)
	}
	us := s.RegionURLs["us"]
	hc := h2cClient()
	for region, url := range s.RegionURLs {
		pl := loginAt(t, hc, url)
		resp, err := pl.games.Ping(ctx, connect.NewRequest(&ludusv1.PingRequest{ClientUnixNanos: 1}))
		if err != nil || resp.Msg.Region != region {
			t.Fatalf("Ping at the %s gateway: %v, %v", region, resp, err)
		}
	}
	// A game created through a region's gateway runs in that region: its
	// player is near that gateway. (The fleet's order alone would put each
	// game on either node, by its id.)
	for region, url := range s.RegionURLs {
		pl := loginAt(t, hc, url)
		for range 3 {
			g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 1}))
			if err != nil {
				t.Fatalf("CreateGame at the %s gateway: %v", region, err)
			}
			if got := regionOf[g.Msg.Game.NodeId]; got != region {
				t.Fatalf("a game created through the %s gateway runs on %s (region %s)", region, g.Msg.Game.NodeId, got)
			}
		}
	}
	var wg sync.WaitGroup
	found := make(chan *ludusv1.MatchFound, 4)
	for i := 0; i < 4; i++ {
		pl := loginAt(t, hc, us)
		mm := ludusv1connect.NewMatchmakingServiceClient(hc, us, connect.WithInterceptors(withTicket(&pl.ticket)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := mm.FindMatch(ctx, connect.NewRequest(&ludusv1.FindMatchRequest{Mode: "arena", RttMs: map[string]int32{"us": 30}}))
			if err != nil {
				t.Errorf("FindMatch: %v", err)
				return
			}
			defer st.Close()
			for st.Receive() {
				if f := st.Msg().GetFound(); f != nil {
					found <- f
					return
				}
			}
			t.Errorf("search ended without a match: %v", st.Err())
		}()
	}
	wg.Wait()
	close(found)
	n := 0
	for f := range found {
		n++
		if f.Region != "us" {
			t.Fatalf("matched in region %q, want us", f.Region)
		}
		g, err := s.Etcd.View().Game(ctx, s.TenantID, f.GameId)
		if err != nil {
			t.Fatal(err)
		}
		if regionOf[g.Owner] != "us" {
			t.Fatalf("the us match runs on %s (region %s)", g.Owner, regionOf[g.Owner])
		}
	}
	if n != 4 {
		t.Fatalf("%d of 4 players matched", n)
	}
}
