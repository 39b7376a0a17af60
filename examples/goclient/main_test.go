package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/client"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/sdk/abi"
)

// slowGateway signs a guest in, seats it, and streams pixels only after
// firstFrame, acknowledging inputs at the current tick.
type slowGateway struct {
	ludusv1connect.UnimplementedGameServiceHandler
	ludusv1connect.UnimplementedAuthServiceHandler
	firstFrame time.Duration
}

func (g *slowGateway) GuestLogin(ctx context.Context, req *connect.Request[ludusv1.GuestLoginRequest]) (*connect.Response[ludusv1.GuestLoginResponse], error) {
	return connect.NewResponse(&ludusv1.GuestLoginResponse{Ticket: "t", ExpiresAt: timestamppb.New(time.Now().Add(time.Hour)),
		AccountId: "a_1", DisplayName: req.Msg.DisplayName}), nil
}

func (g *slowGateway) JoinGame(ctx context.Context, req *connect.Request[ludusv1.JoinGameRequest]) (*connect.Response[ludusv1.JoinGameResponse], error) {
	return connect.NewResponse(&ludusv1.JoinGameResponse{Slot: 1, Game: &ludusv1.GameInfo{GameId: req.Msg.GameId, NodeId: "n1",
		ModuleName: "arena", BuildId: "0123456789abcdef", ViewFormat: "indexed8", InputKind: "state", TickRate: 35, State: "running"}}), nil
}

func view(tick int64) []byte {
	var pal [768]byte
	v := make([]byte, abi.Indexed8HeaderSize+8)
	px := abi.Indexed8Header(v, 4, 2, &pal)
	for i := range px {
		px[i] = byte(tick) + byte(i)
	}
	return v
}

func (g *slowGateway) Play(ctx context.Context, st *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error {
	if _, err := st.Receive(); err != nil {
		return err
	}
	out := make(chan *ludusv1.PlayResponse, 64)
	go func() {
		for {
			m, err := st.Receive()
			if err != nil {
				return
			}
			if in := m.GetInput(); in != nil {
				out <- &ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Ack{Ack: &ludusv1.InputAck{AckedSeq: in.Seq}}}
			}
		}
	}()
	if err := st.Send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Status{Status: &ludusv1.Status{
		State: "running", ViewFormat: "indexed8", TickRate: 35, Delivery: "pixels"}}}); err != nil {
		return err
	}
	first := time.After(g.firstFrame)
	tk := time.NewTicker(5 * time.Millisecond)
	defer tk.Stop()
	var tick int64
	started := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-first:
			started = true
		case m := <-out:
			m.GetAck().Tick = tick
			if err := st.Send(m); err != nil {
				return err
			}
		case <-tk.C:
			if !started {
				if err := st.Send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Status{Status: &ludusv1.Status{
					State: "running", ViewFormat: "indexed8", TickRate: 35, Delivery: "pixels"}}}); err != nil {
					return err
				}
				continue
			}
			tick++
			if err := st.Send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Frame{Frame: &ludusv1.Frame{Tick: tick, View: view(tick)}}}); err != nil {
				return err
			}
		}
	}
}

// The turn is due before the first frame arrived: play waits for a frame to
// compare the turn against (it dereferenced a nil frame).
func TestPlayTurnBeforeFirstFrame(t *testing.T) {
	g := &slowGateway{firstFrame: 700 * time.Millisecond}
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewGameServiceHandler(g))
	mux.Handle(ludusv1connect.NewAuthServiceHandler(g))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := client.Dial(srv.URL)
	defer c.Close()
	if _, err := c.GuestLogin(ctx, "demo", client.NewDeviceID(), "tester"); err != nil {
		t.Fatal(err)
	}
	if err := play(ctx, c, "g1", client.Pixels, time.Second); err != nil {
		t.Fatal(err)
	}
}
