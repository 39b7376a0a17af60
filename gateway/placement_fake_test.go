package gateway

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ops/fleet"
)

type placement struct{ game, node string }

// createGames creates n games as alice and returns where each went, in order,
// and how long the whole burst took.
func createGames(t *testing.T, c *fakeCluster, n int) ([]placement, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.client(ticketAlice)
	start := time.Now()
	var out []placement
	for i := 0; i < n; i++ {
		resp, err := cl.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 1}))
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		out = append(out, placement{resp.Msg.Game.GetGameId(), resp.Msg.Game.GetNodeId()})
	}
	return out, time.Since(start)
}

// expectedPlacements replays a burst of placements with fleet.Rank: each game
// goes to the first node of its ranking that does not refuse, the games this
// gateway placed earlier in the burst counting as load (the gateway counts its
// placements of the last 2 s).
func expectedPlacements(nodes []clusterstate.NodeInfo, games []placement, refuses map[string]bool) []string {
	nodes = append([]clusterstate.NodeInfo(nil), nodes...)
	var out []string
	for _, g := range games {
		want := ""
		for _, n := range fleet.Rank(nodes, g.game, fleet.RankOptions{}) {
			if !refuses[n.ID] {
				want = n.ID
				break
			}
		}
		out = append(out, want)
		for i := range nodes {
			if nodes[i].ID == want {
				nodes[i].Games++
			}
		}
	}
	return out
}

// checkPlacements compares a burst's placements with fleet.Rank's, when the
// burst was short enough for the gateway to have counted all of it.
func checkPlacements(t *testing.T, nodes []clusterstate.NodeInfo, games []placement, took time.Duration, refuses map[string]bool) {
	t.Helper()
	if took > 1800*time.Millisecond {
		t.Logf("the burst took %v: the gateway forgot its early placements, not comparing with fleet.Rank", took)
		return
	}
	want := expectedPlacements(nodes, games, refuses)
	for i, g := range games {
		if g.node != want[i] {
			t.Fatalf("game %d (%s) went to %s; fleet.Rank puts it on %s", i, g.game, g.node, want[i])
		}
	}
}

// CreateGame places games by fleet.Rank over the directory's nodes: weighted
// by free capacity, never on a draining or a full node.
func TestFakeCreateGamePlacement(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{GamesPerMinute: -1}) // many games from one account
	infos := []clusterstate.NodeInfo{
		{ID: "big", Capacity: 100, Games: 10},                  // 90 free
		{ID: "mid", Capacity: 100, Games: 70},                  // 30 free
		{ID: "small", Capacity: 20, Games: 15},                 // 5 free
		{ID: "drain", Capacity: 100, Games: 0, Draining: true}, // leaving
		{ID: "full", Capacity: 10, Games: 10},                  // no room
	}
	var nodes []clusterstate.NodeInfo
	for _, info := range infos {
		n := c.addNode(info)
		info.Addr = n.url
		nodes = append(nodes, info)
	}
	c.waitNodes(len(infos))
	games, took := createGames(t, c, 60)
	count := map[string]int{}
	seen := map[string]bool{}
	for _, g := range games {
		if seen[g.game] {
			t.Fatalf("game id %s twice", g.game)
		}
		seen[g.game] = true
		count[g.node]++
	}
	for id, n := range c.nodes {
		var placed []string
		var calls int
		n.snapshot(func(n *fakeNode) { placed, calls = n.starts, n.startCalls })
		if len(placed) != count[id] {
			t.Fatalf("node %s started %d games; the responses name it %d times", id, len(placed), count[id])
		}
		if (id == "drain" || id == "full") && calls > 0 {
			t.Fatalf("node %s was asked to start %d games", id, calls)
		}
	}
	t.Logf("placements: %v in %v", count, took)
	if count["big"] <= count["mid"] || count["mid"] < count["small"] || count["big"]+count["mid"]+count["small"] != 60 {
		t.Fatalf("placements %v: want most on big (90 free), then mid (30), then small (5)", count)
	}
	if took < 1800*time.Millisecond && count["small"] > 5 {
		t.Fatalf("small (5 free) got %d games in %v", count["small"], took)
	}
	checkPlacements(t, nodes, games, took, nil)
	if r := c.backend.resolves.Load(); r != 60 {
		t.Fatalf("the module store resolved %d modules", r)
	}
	if m := c.backend.mints.Load(); m != 60 {
		t.Fatalf("the backend minted %d match credentials", m)
	}
}

// A node that answers ResourceExhausted (full, its record not yet saying so)
// makes the gateway try the next node of the ranking.
func TestFakeCreateGameSkipsExhaustedNode(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{GamesPerMinute: -1}) // many games from one account
	infos := []clusterstate.NodeInfo{
		{ID: "x", Capacity: 100, Games: 0}, // first choice most of the time, but full
		{ID: "y", Capacity: 100, Games: 50},
		{ID: "z", Capacity: 100, Games: 50},
	}
	var nodes []clusterstate.NodeInfo
	for _, info := range infos {
		n := c.addNode(info)
		info.Addr = n.url
		nodes = append(nodes, info)
	}
	x := c.nodes["x"]
	x.set(func(n *fakeNode) {
		n.startErr = connect.NewError(connect.CodeResourceExhausted, errors.New("node x is full (100 games)"))
	})
	c.waitNodes(len(infos))
	games, took := createGames(t, c, 20)
	var calls int
	x.snapshot(func(n *fakeNode) { calls = n.startCalls })
	if calls == 0 {
		t.Fatal("x, first in most rankings, was never asked")
	}
	for _, g := range games {
		if g.node == "x" {
			t.Fatalf("game %s placed on x, which refused", g.game)
		}
	}
	checkPlacements(t, nodes, games, took, map[string]bool{"x": true})
}

// When no node can take the game, CreateGame answers Unavailable without the
// nodes' messages, ids or addresses (docs/API.md: node addresses and
// transport errors never reach players).
func TestFakeCreateGameHidesNodeErrors(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{GamesPerMinute: -1}) // many games from one account
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("every node full", func(t *testing.T) {
		x := c.addNode(clusterstate.NodeInfo{ID: "node-x", Capacity: 8})
		x.set(func(n *fakeNode) {
			n.startErr = connect.NewError(connect.CodeResourceExhausted, errors.New("node node-x is full (8 games)"))
		})
		c.waitNodes(1)
		_, err := c.client(ticketAlice).CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena"}))
		if code := connect.CodeOf(err); code != connect.CodeUnavailable && code != connect.CodeResourceExhausted {
			t.Fatalf("create with every node full: %v", err)
		}
		if l := leaks(err.Error(), x); l != "" {
			t.Errorf("create with every node full: %v leaks %q", err, l)
		}
	})

	t.Run("node unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "http://" + ln.Addr().String()
		ln.Close()
		c.del(clusterstate.NodeKey("node-x"))
		c.put(clusterstate.NodeKey("node-dead"), clusterstate.NodeInfo{ID: "node-dead", Addr: dead, Capacity: 8})
		eventually(t, "the directory to list only node-dead", func() bool {
			l, ok := c.gw.dir.nodeList()
			return ok && len(l) == 1 && l[0].ID == "node-dead"
		})
		_, err = c.client(ticketAlice).CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena"}))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("create with the only node unreachable: %v", err)
		}
		if l := leaks(err.Error(), &fakeNode{id: "node-dead", url: dead}); l != "" {
			t.Errorf("create with the only node unreachable: %v leaks %q", err, l)
		}
	})
}
