package e2e

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/gateway"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/devstack"
)

// TestAnyGatewayServesAnyGame: a second gateway, sharing nothing with the first
// but etcd and the backend's key set, serves a game created through the first —
// frames, inputs and a spectator — and keeps a stream attached across a handoff.
func TestAnyGatewayServesAnyGame(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h2c := &http.Client{Transport: gateway.H2CTransport()}
	gw2, err := gateway.New(gateway.Config{
		Etcd:         stack.Etcd,
		Verifier:     auth.NewVerifier(auth.NewJWKSClient(stack.BackendURL+"/.well-known/jwks.json", auth.WithHTTPClient(h2c)), nil),
		BackendURL:   stack.BackendURL,
		ClusterToken: stack.ClusterToken,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := devstack.NewServer(gw2.Handler())
	go srv.Serve(ln)
	defer srv.Close()
	second := "http://" + ln.Addr().String()

	p := protocols()[0]
	pl := login(t, p, devstack.DemoTenant)
	g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 2}))
	if err != nil {
		t.Fatal(err)
	}
	id := g.Msg.Game.GameId
	via2 := ludusv1connect.NewGameServiceClient(p.client, second, connect.WithInterceptors(withTicket(&pl.ticket)))
	if _, err := via2.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
		t.Fatal(err)
	}
	if ack, err := via2.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: 1, Payload: []byte{8}})); err != nil || ack.Msg.AckedSeq != 1 {
		t.Fatalf("input via the second gateway: %v %v", ack, err)
	}
	stream, err := via2.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: id}))
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
	// Move the game (through the first gateway's fleet service); the second
	// gateway's stream follows it.
	fleetc := ludusv1connect.NewFleetServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&stack.OperatorKey)))
	if _, err := fleetc.HandoffGame(ctx, connect.NewRequest(&ludusv1.HandoffGameRequest{TenantId: stack.TenantID, GameId: id})); err != nil {
		t.Fatal(err)
	}
	reattached, after := false, 0
	for after < 5 && stream.Receive() {
		if st := stream.Msg().GetStatus(); st != nil && st.MigrationMs > 0 {
			reattached = true
		}
		if stream.Msg().GetFrame() != nil && reattached {
			after++
		}
	}
	if frames < 5 || !reattached || after < 5 {
		t.Fatalf("second gateway: %d frames, re-attached %v, %d frames after: %v", frames, reattached, after, stream.Err())
	}
	spec, err := via2.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: id}))
	if err != nil {
		t.Fatal(err)
	}
	defer spec.Close()
	for got := 0; got < 3; {
		if !spec.Receive() {
			t.Fatalf("spectating via the second gateway: %v", spec.Err())
		}
		if spec.Msg().GetFrame() != nil {
			got++
		}
	}
}
