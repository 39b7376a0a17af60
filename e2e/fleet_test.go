package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/devstack"
)

// TestDrainThroughFleetService: an operator drains a node over the FleetService;
// every game it ran continues on another node with the same players, slots and
// input sequence, and the drained node leaves the fleet. (The stack has three
// nodes so the other tests keep two.)
func TestDrainThroughFleetService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p := protocols()[0]
	pl := login(t, p, devstack.DemoTenant)
	fleetc := ludusv1connect.NewFleetServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&stack.OperatorKey)))
	admin := ludusv1connect.NewAdminServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&stack.OperatorKey)))

	// A tenant key cannot drain.
	bad := "lds_not_an_operator_key"
	_, err := ludusv1connect.NewFleetServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&bad))).
		DrainNode(ctx, connect.NewRequest(&ludusv1.DrainNodeRequest{NodeId: "node-1"}))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = fleetc.DrainNode(ctx, connect.NewRequest(&ludusv1.DrainNodeRequest{NodeId: "no-such-node"}))
	wantCode(t, err, connect.CodeNotFound)

	byNode := map[string][]string{}
	for i := 0; i < 6; i++ {
		g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 2}))
		if err != nil {
			t.Fatal(err)
		}
		id := g.Msg.Game.GameId
		if _, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
			t.Fatal(err)
		}
		if _, err := pl.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: 1, Payload: []byte{1}})); err != nil {
			t.Fatal(err)
		}
		byNode[g.Msg.Game.NodeId] = append(byNode[g.Msg.Game.NodeId], id)
	}
	victim, most := "", 0
	for n, ids := range byNode {
		if len(ids) > most {
			victim, most = n, len(ids)
		}
	}
	resp, err := fleetc.DrainNode(ctx, connect.NewRequest(&ludusv1.DrainNodeRequest{NodeId: victim}))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("draining %s with %d games", victim, resp.Msg.Games)
	for {
		nodes, err := admin.ListNodes(ctx, connect.NewRequest(&ludusv1.ListNodesRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		present := false
		for _, n := range nodes.Msg.Nodes {
			present = present || n.Id == victim
		}
		if !present {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never left the fleet", victim)
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, id := range byNode[victim] {
		// The receiving node may still be replaying the game: Unavailable
		// means "retry in a moment", as for any client.
		var j *connect.Response[ludusv1.JoinGameResponse]
		for {
			j, err = pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id}))
			if connect.CodeOf(err) != connect.CodeUnavailable || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("game %s after drain: %v", id, err)
		}
		if j.Msg.Slot != 0 || j.Msg.Game.NodeId == victim || j.Msg.Game.State != "running" {
			t.Fatalf("game %s after drain: %+v", id, j.Msg)
		}
		// Seq 1 was acknowledged before the move: re-sending it is acknowledged, not applied.
		ack, err := pl.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: 1, Payload: []byte{1}}))
		if err != nil || ack.Msg.AckedSeq != 1 {
			t.Fatalf("re-sent input after drain: %v %v", ack, err)
		}
		stream, err := pl.games.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: id}))
		if err != nil {
			t.Fatal(err)
		}
		frames := 0
		for frames < 3 && stream.Receive() {
			if stream.Msg().GetFrame() != nil {
				frames++
			}
		}
		stream.Close()
		if frames < 3 {
			t.Fatalf("game %s: no frames after drain: %v", id, stream.Err())
		}
	}
}

// TestEndGameThroughFleetService: an operator ends a running game; the player's
// stream ends with the operator's reason and the game is failed, not resumed.
// Bad calls get the right codes, and nothing is ended by them.
func TestEndGameThroughFleetService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := protocols()[0]
	pl := login(t, p, devstack.DemoTenant)
	fleetc := ludusv1connect.NewFleetServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&stack.OperatorKey)))
	g, stream := pl.play(t, ctx, &ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 1}, 10)
	id := g.GameId

	bad := "lds_not_an_operator_key"
	_, err := ludusv1connect.NewFleetServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&bad))).
		EndGame(ctx, connect.NewRequest(&ludusv1.EndGameRequest{TenantId: stack.TenantID, GameId: id}))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = fleetc.EndGame(ctx, connect.NewRequest(&ludusv1.EndGameRequest{TenantId: stack.TenantID, GameId: "no-such-game"}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = fleetc.EndGame(ctx, connect.NewRequest(&ludusv1.EndGameRequest{TenantId: "t_other", GameId: id}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = fleetc.EndGame(ctx, connect.NewRequest(&ludusv1.EndGameRequest{TenantId: stack.TenantID, GameId: id, Reason: strings.Repeat("x", 201)}))
	wantCode(t, err, connect.CodeInvalidArgument)

	end, err := fleetc.EndGame(ctx, connect.NewRequest(&ludusv1.EndGameRequest{TenantId: stack.TenantID, GameId: id, Reason: "cheating reported"}))
	if err != nil {
		t.Fatal(err)
	}
	if end.Msg.NodeId != g.NodeId || end.Msg.Tick <= 0 {
		t.Fatalf("EndGame answered %+v; the game ran on %s", end.Msg, g.NodeId)
	}
	var last *ludusv1.Status
	for stream.Receive() {
		if st := stream.Msg().GetStatus(); st != nil {
			last = st
		}
	}
	if last == nil || last.State != "failed" || !strings.Contains(last.Message, "ended by an operator: cheating reported") {
		t.Fatalf("the player's stream ended with %+v (err %v)", last, stream.Err())
	}
	// Ended for good: a second call finds it finished (or archived already).
	_, err = fleetc.EndGame(ctx, connect.NewRequest(&ludusv1.EndGameRequest{TenantId: stack.TenantID, GameId: id}))
	if c := connect.CodeOf(err); c != connect.CodeFailedPrecondition && c != connect.CodeNotFound {
		t.Fatalf("ending it again: %v", err)
	}
}
