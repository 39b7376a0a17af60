package gateway

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// One controller per slot (the node decides; docs/API.md): every client
// stream of a player names itself to the node with one controller id — a
// Play's frames and inputs the same one, another stream another — and a node
// ending a replaced stream with Aborted reaches the client as such, not as a
// move to follow.
func TestFakeStreamsNameTheirController(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	play, msgs := openPlay(t, ctx, c, ticketAlice, "g1")
	defer play.CloseResponse()
	waitStatus(t, msgs, "node-a")
	if err := sendPlayInput(t, play, 1); err != nil {
		t.Fatal(err)
	}
	collectAcks(t, msgs, 1, 5*time.Second, 0)
	frames, err := c.client(ticketAlice).StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: "g1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer frames.Close()
	if !frames.Receive() {
		t.Fatal(frames.Err())
	}
	var frameCtl, inputCtl []string
	a.snapshot(func(n *fakeNode) { frameCtl, inputCtl = slices.Clone(n.frameCtl), slices.Clone(n.inputCtl) })
	if len(frameCtl) != 2 || len(inputCtl) != 1 || frameCtl[0] == "" || frameCtl[0] != inputCtl[0] || frameCtl[1] == "" || frameCtl[1] == frameCtl[0] {
		t.Fatalf("controllers: frame streams %q, inputs streams %q; want the Play's frames and inputs to share one, the other stream its own", frameCtl, inputCtl)
	}

	a.endStreams(endReplaced)
	for {
		m := next(t, msgs, 5*time.Second)
		if !m.end {
			continue
		}
		var ce *connect.Error
		if !errors.As(m.err, &ce) || ce.Code() != connect.CodeAborted || ce.Message() != "this player is now controlled from another window" {
			t.Fatalf("the replaced Play ended with %v; want Aborted: this player is now controlled from another window", m.err)
		}
		break
	}
	var streams int
	a.snapshot(func(n *fakeNode) { streams = n.frameStreams })
	if streams != 2 {
		t.Fatalf("the gateway re-attached a replaced stream: %d frame streams", streams)
	}
}

// ListGames shows the lobby's fields from the game's spec: bots, the host's
// name and when the game was created; players counts humans.
func TestFakeListGamesShowsLobbyFields(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c.put(clusterstate.GameKey(tenantT1, "lobby"), clusterstate.GameSpec{TenantID: tenantT1, GameID: "lobby", ModuleName: "arena", BuildID: fakeBuildID,
		CreatedAt: created, TickRate: 35, MaxPlayers: 8, FrameDivisor: 2, ViewFormat: "fake", Bots: 3, HostName: "Ada"})
	c.put(clusterstate.StatusKey(tenantT1, "lobby"), clusterstate.GameStatus{State: clusterstate.StateRunning, NodeID: "node-a", Players: 2})
	c.setOwner(tenantT1, "lobby", "node-a")
	resp, err := c.client(ticketAlice).ListGames(context.Background(), connect.NewRequest(&ludusv1.ListGamesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Msg.Games) != 1 {
		t.Fatalf("games: %v", resp.Msg.Games)
	}
	g := resp.Msg.Games[0]
	if g.Bots != 3 || g.HostName != "Ada" || g.CreatedAtUnixMs != created.UnixMilli() || g.Players != 2 {
		t.Fatalf("lobby fields: bots %d host %q created %d players %d; want 3, Ada, %d, 2", g.Bots, g.HostName, g.CreatedAtUnixMs, g.Players, created.UnixMilli())
	}
}
