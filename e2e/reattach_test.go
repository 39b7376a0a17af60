package e2e

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/devstack"
)

// TestReattachDuringHandoff: a client's open frame stream survives its game
// being handed to another node: it sees a "migrating" status, then a status
// naming the new node with the migration's duration, then frames again —
// without reconnecting. Inputs sent after the move are acknowledged.
func TestReattachDuringHandoff(t *testing.T) {
	for _, c := range []struct {
		p        protocol
		delivery ludusv1.Delivery
	}{
		{protocols()[0], ludusv1.Delivery_DELIVERY_PIXELS}, {protocols()[0], ludusv1.Delivery_DELIVERY_SNAPSHOTS},
		{protocols()[1], ludusv1.Delivery_DELIVERY_PIXELS}, {protocols()[1], ludusv1.Delivery_DELIVERY_SNAPSHOTS},
		{protocols()[2], ludusv1.Delivery_DELIVERY_SNAPSHOTS},
	} {
		p := c.p
		t.Run(p.name+"/"+c.delivery.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			pl := login(t, p, devstack.DemoTenant)
			g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 2}))
			if err != nil {
				t.Fatal(err)
			}
			id, from := g.Msg.Game.GameId, g.Msg.Game.NodeId
			if _, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
				t.Fatal(err)
			}
			stream, err := pl.games.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: id, Delivery: c.delivery}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			frames := 0
			for frames < 5 && stream.Receive() {
				if stream.Msg().GetFrame() != nil {
					frames++
				}
			}
			fleetc := ludusv1connect.NewFleetServiceClient(p.client, stack.GatewayURL, append(append([]connect.ClientOption{}, p.opts...), connect.WithInterceptors(withTicket(&stack.OperatorKey)))...)
			moved, err := fleetc.HandoffGame(ctx, connect.NewRequest(&ludusv1.HandoffGameRequest{TenantId: stack.TenantID, GameId: id}))
			if err != nil {
				t.Fatal(err)
			}
			if moved.Msg.FromNodeId != from || moved.Msg.ToNodeId == from {
				t.Fatalf("handoff %+v from %s", moved.Msg, from)
			}
			sawMigrating, reattached, after := false, false, 0
			for after < 5 && stream.Receive() {
				m := stream.Msg()
				if st := m.GetStatus(); st != nil {
					if st.State == "migrating" {
						sawMigrating = true
					}
					if want := map[bool]string{true: "snapshots", false: "pixels"}[c.delivery == ludusv1.Delivery_DELIVERY_SNAPSHOTS]; st.NodeId != "" && st.State == "running" && st.Delivery != "" && st.Delivery != want {
						t.Fatalf("stream asked for %s, status says %q", want, st.Delivery)
					}
					if st.MigrationMs > 0 || (st.PreviousNodeId == from && st.NodeId == moved.Msg.ToNodeId) {
						reattached = true
						t.Logf("%s: re-attached from %s to %s in %d ms", p.name, st.PreviousNodeId, st.NodeId, st.MigrationMs)
					}
				}
				if m.GetFrame() != nil && reattached {
					after++
				}
			}
			if !sawMigrating || !reattached || after < 5 {
				t.Fatalf("migrating=%v reattached=%v frames after=%d err=%v", sawMigrating, reattached, after, stream.Err())
			}
			if _, err := pl.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: 1, Payload: []byte{4}})); err != nil {
				t.Fatal(err)
			}
		})
	}
}
