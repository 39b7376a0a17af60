package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// playGateway is the fake gateway with Play replaced by play; it counts the
// Play streams opened.
type playGateway struct {
	*fakeGateway
	play  func(ctx context.Context, n int32, st *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error
	opens atomic.Int32
}

func (a *playGateway) Play(ctx context.Context, st *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error {
	return a.play(ctx, a.opens.Add(1), st)
}

// start serves a over HTTP/1.1 and h2c on 127.0.0.1; modules, if not nil,
// serves GET /modules/.
func (a *playGateway) start(t *testing.T, modules http.HandlerFunc) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewGameServiceHandler(a))
	mux.Handle(ludusv1connect.NewAuthServiceHandler(a.fakeGateway))
	if modules != nil {
		mux.HandleFunc("GET /modules/", modules)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func sendRunning(st *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error {
	return st.Send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Status{Status: &ludusv1.Status{
		State: "running", ViewFormat: "indexed8", TickRate: 35, Delivery: "pixels"}}})
}

// openRunning answers a stream's first request with a running status and a
// pixel frame of each of ticks.
func openRunning(st *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse], ticks ...int64) error {
	if _, err := st.Receive(); err != nil {
		return err
	}
	if err := sendRunning(st); err != nil {
		return err
	}
	for _, tick := range ticks {
		if err := st.Send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Frame{Frame: &ludusv1.Frame{Tick: tick, View: pixelView(tick)}}}); err != nil {
			return err
		}
	}
	return nil
}

// shortStall shortens the stall watchdog and the give-up time for one test.
func shortStall(t *testing.T, stall, giveUp time.Duration) {
	oldStall, oldGiveUp := stallTimeout, giveUpAfter
	stallTimeout, giveUpAfter = stall, giveUp
	t.Cleanup(func() { stallTimeout, giveUpAfter = oldStall, oldGiveUp })
}

// A gateway that stops sending (a frozen process, a half-open path) but keeps
// the stream open: the watchdog re-opens the stream within its bound, and a
// stream that never comes back ends the session after the give-up time.
func TestStalledStreamIsReopenedThenGivenUp(t *testing.T) {
	shortStall(t, 300*time.Millisecond, 2*time.Second)
	a := &playGateway{fakeGateway: &fakeGateway{game: arenaGame()}}
	a.play = func(ctx context.Context, n int32, st *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error {
		if _, err := st.Receive(); err != nil {
			return err
		}
		if n == 1 {
			if err := sendRunning(st); err != nil {
				return err
			}
			for tick := int64(1); tick <= 5; tick++ {
				if err := st.Send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Frame{Frame: &ludusv1.Frame{Tick: tick, View: pixelView(tick)}}}); err != nil {
					return err
				}
			}
		}
		<-ctx.Done() // silent from now on, the stream open
		return nil
	}
	c := dialFake(t, a.start(t, nil))
	s, err := c.Play(context.Background(), "g1", Pixels)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	frames(t, s, 1, 10*time.Second)
	deadline := time.Now().Add(3 * time.Second) // the bound, the backoff and ample margin
	for a.opens.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no second stream 3 s after the first went silent (bound %v); notices %v", stallTimeout, noticesOf(s))
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the session still runs 10 s after its stream went silent for good (give-up %v); streams %d", giveUpAfter, a.opens.Load())
	}
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "could not be restored") {
		t.Fatalf("session error %v, want one saying the stream could not be restored", err)
	}
	if got := s.Stats().Reconnects; got < 2 {
		t.Errorf("%d reconnects, want several", got)
	}
}

// A "migrating" status lengthens the watchdog's bound: the gateway may wait
// for the game's new owner in silence.
func TestStallWatchdogWaitsOutMigration(t *testing.T) {
	shortStall(t, 200*time.Millisecond, 30*time.Second)
	a := &playGateway{fakeGateway: &fakeGateway{game: arenaGame()}}
	a.play = func(ctx context.Context, n int32, st *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error {
		if err := openRunning(st, 1); err != nil {
			return err
		}
		if err := st.Send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Status{Status: &ludusv1.Status{State: "migrating"}}}); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second): // five bounds
		}
		if err := st.Send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Status{Status: &ludusv1.Status{State: "running", MigrationMs: 1000}}}); err != nil {
			return err
		}
		if err := st.Send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Frame{Frame: &ludusv1.Frame{Tick: 2, View: pixelView(2)}}}); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
	c := dialFake(t, a.start(t, nil))
	s, err := c.Play(context.Background(), "g1", Pixels)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fs := frames(t, s, 2, 10*time.Second)
	if fs[1].Tick != 2 || a.opens.Load() != 1 {
		t.Fatalf("frame tick %d after %d streams, want tick 2 on the first stream", fs[1].Tick, a.opens.Load())
	}
}

// The default transport pings HTTP/2 connections, so that a half-open path
// fails the streams it carries.
func TestDefaultHTTPClientPings(t *testing.T) {
	for _, u := range []string{"http://127.0.0.1:1", "https://127.0.0.1:1"} {
		tr := DefaultHTTPClient(u).Transport.(*http.Transport)
		if tr.HTTP2 == nil || tr.HTTP2.SendPingTimeout <= 0 || tr.HTTP2.PingTimeout <= 0 {
			t.Errorf("%s: HTTP2 config %+v, want pings", u, tr.HTTP2)
		}
	}
}
